#!/usr/bin/env bash
# Where a fresh operation's CPU goes, by thread and by code: perf samples (cpu-clock) of
# idemproxy during a 6 s wrk run of fresh operations at CONNS connections, each sample's own
# function (self time) put in one class: redb, the kernel, the allocator (mimalloc), libc's
# memory copies, hyper/tokio/h1, idemproxy's own code, and the rest.
#
#   bench/profile.sh [CONNS]     default 64   (IDEMPROXY_BIN=PATH profiles that binary, unbuilt)
#
# Needs perf (apt-get install linux-perf). Shares are of each thread group's own samples, so
# they do not move with the machine's load the way req/s does.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf >/dev/null || { echo "profile: perf is missing (apt-get install linux-perf)" >&2; exit 1; }
name=profile
source bench/fresh-setup.sh "$@"
perf record -q -F 1999 -p "$proxy_pid" -o "$work/perf.data" >/dev/null 2>&1 & perf_pid=$!
sleep 0.3
n=$(wrk -t1 -c"$conns" -d"$duration" -s "$work/fresh.lua" "$url" -- run | awk '/requests in/ {print $1}')
kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true
echo "idemproxy fresh operations: $(nproc) cores, $conns connections, wrk -t1 -d$duration, $n operations, $(date -u +%FT%TZ)"
# One line per (thread, function): samples, comm, symbol.
perf report -i "$work/perf.data" --no-children --sort comm,sym -F overhead,sample,comm,sym \
  --stdio 2>/dev/null | awk '/^ *[0-9.]+%/' |
awk '{
  samples = $2; comm = $3; sym = ""
  for (i = 4; i <= NF; i++) sym = sym " " $i
  group = (comm ~ /ledge/) ? "writer" : (comm ~ /tokio-rt-worker|idemproxy-shard/) ? "workers" : "other"
  if (sym ~ /\[k\]/) class = "kernel"
  else if (sym ~ /redb::/) class = "redb"
  else if (sym ~ /mi_|_mi_|mimalloc/) class = "allocator"
  else if (sym ~ /mem(move|cpy|set|cmp)|__memcmp/) class = "mem copies"
  else if (sym ~ /hyper::|tokio::|h2::|http::|bytes::|httparse/) class = "hyper/tokio/http"
  else if (sym ~ /idemproxy::/) class = "idemproxy"
  else if (sym ~ /serde|ring|sha2|core::|alloc::/) class = "serde/crypto/core"
  else class = "rest"
  total[group] += samples; part[group, class] += samples
} END {
  split("writer workers", groups, " ")
  split("redb kernel allocator mem@copies hyper/tokio/http idemproxy serde/crypto/core rest", classes, " ")
  for (g = 1; g <= 2; g++) {
    grp = groups[g]; if (!total[grp]) continue
    printf "%-8s %6d samples:", grp, total[grp]
    for (c = 1; c <= 8; c++) {
      cls = classes[c]; gsub("@", " ", cls)
      if (part[grp, cls]) printf "  %s %.0f%%", cls, 100 * part[grp, cls] / total[grp]
    }
    printf "\n"
  }
}'
