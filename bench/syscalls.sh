#!/usr/bin/env bash
# Which system calls one request makes, by name: idemproxy's fresh operations, replays or
# pass-through (or nginx as a reverse proxy), counted with perf over one wrk run.
#
#   bench/syscalls.sh [SCENARIO] [CONNS]   fresh (default), replay, pass or nginx; CONNS default 64
#                                          (IDEMPROXY_BIN=PATH: that binary, unbuilt)
#
# One `wrk -t1 -d5s` run after a 2 s warm-up, with `perf stat -e 'syscalls:sys_enter_*'` on the
# server's processes; prints each call's count per request, most frequent first. Counting every
# tracepoint slows the server, so read the counts, not the req/s. Needs wrk and perf; installs
# nginx-light if nginx is missing. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf >/dev/null || { echo "syscalls: perf is missing (apt-get install linux-perf)" >&2; exit 1; }
scenario=${1:-fresh}; conns=${2:-64}
duration=5s; conns_list=$conns; workers=$(nproc); bench_dir=target/bench
bin=${IDEMPROXY_BIN:-./target/release/idemproxy}
if [ -z "${IDEMPROXY_BIN:-}" ]; then cargo build --release --quiet --bin idemproxy; fi
mkdir -p "$bench_dir"
source bench/lib.sh

start_proxy syscalls
script=""
case $scenario in
  fresh) url="http://127.0.0.1:$proxy_port/bench/v1/refunds"; script="$work/fresh.lua"; traced=$proxy_pid ;;
  replay) url="http://127.0.0.1:$proxy_port"; script="$work/same.lua"; traced=$proxy_pid ;;
  pass) url="http://127.0.0.1:$proxy_port/bench/v1/ping"; traced=$proxy_pid ;;
  nginx) url="http://127.0.0.1:$ngx_port/v1/ping"; traced=$(nginx_workers proxy | xargs | tr ' ' ',') ;;
  *) echo "syscalls: unknown scenario $scenario" >&2; exit 2 ;;
esac
wrk -t1 -c"$conns" -d2s ${script:+-s "$script"} "$url" -- syscalls-warm >/dev/null
perf stat -e 'syscalls:sys_enter_*' -p "$traced" -o "$work/stat" -- sleep 5 &
stat=$!
n=$(wrk -t1 -c"$conns" -d"$duration" ${script:+-s "$script"} "$url" -- syscalls | awk '/requests in/ {print $1}')
wait "$stat"
echo "bench/syscalls.sh: $scenario, $(nproc) cores, $conns connections, wrk -t1 -d$duration, $(date -u +%FT%TZ), $n requests"
awk -v n="$n" '$2 ~ /^syscalls:sys_enter_/ { gsub(",", "", $1); if ($1 > 0) { sub("syscalls:sys_enter_", "", $2); total += $1; printf "%-20s %8.3f\n", $2, $1 / n } }
  END { printf "%-20s %8.3f\n", "(all)", total / n }' "$work/stat" | sort -k2 -nr
