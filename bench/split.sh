#!/usr/bin/env bash
# Where the CPU of one request goes: user space or the kernel, how many system calls it makes
# and how often the server's threads are switched out, for the nginx reverse proxy, idemproxy's
# pass-through, its replays and its fresh operations, in alternating rounds (the machine's
# speed drifts; compare within a round).
#
#   bench/split.sh [ROUNDS] [CONNS]     defaults 2 and 64   (IDEMPROXY_BIN=PATH: that binary, unbuilt)
#
# Each measurement is one `wrk -t1 -d5s` run after a 2 s warm-up, with `perf stat -e
# raw_syscalls:sys_enter,context-switches` on the server's processes and their utime/stime from /proc (the
# nginx proxy's workers, or idemproxy) taken before and after. Needs wrk and perf
# (apt-get install wrk linux-perf); installs nginx-light if nginx is missing. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf >/dev/null || { echo "split: perf is missing (apt-get install linux-perf)" >&2; exit 1; }
rounds=${1:-2}; conns=${2:-64}
duration=5s; conns_list=$conns; workers=$(nproc); bench_dir=target/bench
bin=${IDEMPROXY_BIN:-./target/release/idemproxy}
if [ -z "${IDEMPROXY_BIN:-}" ]; then cargo build --release --quiet --bin idemproxy; fi
mkdir -p "$bench_dir"
source bench/lib.sh

start_proxy split
hz=$(getconf CLK_TCK)
measure() { # name url script pids...   ($prefix: the fresh script's ID prefix)
  local name=$1 url=$2 script=$3; shift 3
  wrk -t1 -c"$conns" -d2s ${script:+-s "$script"} "$url" -- "$prefix-warm" >/dev/null
  read -r u0 s0 < <(user_system_ticks "$@")
  perf stat -e raw_syscalls:sys_enter,context-switches -p "$(echo "$@" | tr ' ' ',')" -o "$work/stat" -- sleep 5 &
  local stat=$!
  local n
  n=$(wrk -t1 -c"$conns" -d"$duration" ${script:+-s "$script"} "$url" -- "$prefix" | awk '/requests in/ {print $1}')
  wait "$stat"
  read -r u1 s1 < <(user_system_ticks "$@")
  awk -v name="$name" -v n="$n" -v u="$((u1 - u0))" -v s="$((s1 - s0))" -v hz="$hz" \
    -v calls="$(awk '/raw_syscalls/ {gsub(",", "", $1); print $1}' "$work/stat")" \
    -v switches="$(awk '/context-switches/ {gsub(",", "", $1); print $1}' "$work/stat")" \
    'BEGIN { printf "| %s | %d | %.2f | %.2f | %.2f | %.2f |\n", name, n / 5, calls / n, u / hz * 1e6 / n, s / hz * 1e6 / n, switches / n }'
}
echo "bench/split.sh: $(nproc) cores, $conns connections, wrk -t1 -d$duration, $(date -u +%FT%TZ)"
echo "| scenario | req/s | syscalls/req | user µs/req | system µs/req | switches/req |"
echo "|---|---:|---:|---:|---:|---:|"
for round in $(seq "$rounds"); do
  prefix=split-$round
  # shellcheck disable=SC2046
  measure nginx-proxy "http://127.0.0.1:$ngx_port/v1/ping" "" $(nginx_workers proxy)
  measure passthrough "http://127.0.0.1:$proxy_port/bench/v1/ping" "" "$proxy_pid"
  measure replay "http://127.0.0.1:$proxy_port" "$work/same.lua" "$proxy_pid"
  measure fresh "http://127.0.0.1:$proxy_port/bench/v1/refunds" "$work/fresh.lua" "$proxy_pid"
done
