#!/usr/bin/env bash
# Where a fresh operation's CPU goes: the ledger's threads against those serving the agents.
#
#   bench/writer.sh [CONNS]      default 64   (IDEMPROXY_BIN=PATH measures that binary, unbuilt)
#
# Starts the nginx upstream and idemproxy as bench/run.sh does, warms it with fresh operations
# for 2 s, then runs wrk (-t1, a new operation ID per request) for 6 s and prints, per
# operation: the CPU time of the ledger's threads ("writer": the writer and the syncer of its
# write-ahead log, whose names the kernel cuts to the same 15 characters) and of the
# shards serving the connections (an older build's tokio workers) (user + system,
# from /proc), the bytes the process wrote to disk, from /metrics the jobs per commit and
# the time per commit, and how often each group's threads were switched out (waiting, or
# preempted). CPU per operation moves far less with the machine's load than req/s.
set -euo pipefail
cd "$(dirname "$0")/.."
name=writer
source bench/fresh-setup.sh "$@"
admin=$(sed -n 's/^admin_listen = "\(.*\)"/\1/p' "$work/writer/proxy.toml")

# CPU ticks of the threads whose name matches the pattern $1 (the writer is "idemproxy-ledge",
# the shards "idemproxy-shard", truncated by the kernel; an older build's workers
# "tokio-rt-worker").
thread_ticks() {
  local t sum=0
  for t in /proc/"$proxy_pid"/task/*; do
    [[ "$(cat "$t/comm")" =~ ^($1)$ ]] && sum=$((sum + $(awk '{print $14 + $15}' "$t/stat")))
  done
  echo "$sum"
}
# Context switches of the threads whose name matches $1: "voluntary involuntary".
thread_switches() {
  local t v=0 i=0
  for t in /proc/"$proxy_pid"/task/*; do
    [[ "$(cat "$t/comm")" =~ ^($1)$ ]] || continue
    v=$((v + $(awk '/^voluntary_ctxt_switches/ {print $2}' "$t/status")))
    i=$((i + $(awk '/^nonvoluntary_ctxt_switches/ {print $2}' "$t/status")))
  done
  echo "$v $i"
}
metric() { curl -s "http://$admin/metrics" | awk -v k="$1" '$1 == k {print $2}'; }
written() { awk '/^write_bytes/ {print $2}' "/proc/$proxy_pid/io"; }
snapshot() {
  echo "$(thread_ticks idemproxy-ledge) $(thread_ticks 'tokio-rt-worker|idemproxy-shard') $(written)" \
    "$(metric idemproxy_ledger_commits_total) $(metric idemproxy_ledger_batch_size_sum)" \
    "$(metric idemproxy_ledger_commit_seconds_sum)" \
    "$(thread_switches idemproxy-ledge) $(thread_switches 'tokio-rt-worker|idemproxy-shard')"
}
before=$(snapshot)
n=$(wrk -t1 -c"$conns" -d"$duration" -s "$work/fresh.lua" "$url" -- run | awk '/requests in/ {print $1}')
after=$(snapshot)
hz=$(getconf CLK_TCK)
echo "idemproxy writer: $(nproc) cores, $conns connections, wrk -t1 -d$duration, $(date -u +%FT%TZ)"
echo "$before $after" | awk -v n="$n" -v hz="$hz" -v secs="${duration%s}" '{
  us = 1e6 / hz
  printf "%d fresh operations (%.0f/s)\n", n, n / secs
  printf "writer  %6.1f µs CPU per operation\n", ($11 - $1) * us / n
  printf "workers %6.1f µs CPU per operation\n", ($12 - $2) * us / n
  printf "disk    %6.0f bytes written per operation\n", ($13 - $3) / n
  printf "commits %6.1f jobs each, %.2f ms each\n", ($15 - $5) / ($14 - $4), ($16 - $6) * 1000 / ($14 - $4)
  printf "switches per operation: writer %.2f voluntary, %.2f involuntary; workers %.2f, %.2f\n",
    ($17 - $7) / n, ($18 - $8) / n, ($19 - $9) / n, ($20 - $10) / n
}'
