#!/usr/bin/env bash
# The benchmark: idemproxy against nginx, in one run on this machine (loopback only).
#
#   bench/run.sh [DURATION] [N]        e.g. bench/run.sh 5s 1000000   (the defaults; N = 0 skips
#                                      the big ledger; BENCH_CONNS="64" measures one count;
#                                      IDEMPROXY_BIN=PATH measures that binary, unbuilt)
#
# Upstream: nginx answering a fixed JSON body. Each scenario is measured with wrk (-t1, DURATION)
# at 1, 16, 64 and 256 connections:
#   upstream     wrk -> nginx upstream                                  (the floor)
#   nginx-proxy  wrk -> nginx proxy_pass (keep-alive) -> upstream       (the baseline of every ratio)
#   passthrough  wrk -> idemproxy (unguarded route) -> upstream
#   fresh        wrk -> idemproxy (a new operation ID per request, from a wrk Lua script)
#   replay       wrk -> idemproxy (one succeeded operation again and again; no upstream trip)
#   replay-big   the same against a ledger pre-filled with N operations (with their events)
#   fresh-big    fresh operations against that ledger, after its replays
# Prints req/s, p50, p99, errors (non-2xx or socket errors), the ratio to nginx-proxy at the
# same connection count, and the CPU time the server under test spent per request (its
# processes' user + system time over the run; "upstream" is the upstream nginx itself); then
# each idemproxy's start-up time (launch to ready line) and peak RSS (VmHWM) after its runs (the
# big ledger's twice: after its replays, then after its fresh operations). The N-operation
# ledger is made once by `examples/prefill.rs` and cached as target/bench/ledger-N.redb; each
# run works on a copy, removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-5s}
fill=${2:-1000000}
conns_list=${BENCH_CONNS:-"1 16 64 256"} # BENCH_CONNS="64" for a quick look
workers=$(nproc) # idemproxy serves agents on one shard (event loop thread) per core; nginx gets as many
bench_dir=target/bench

# IDEMPROXY_BIN=PATH measures that build instead (to compare two builds in turn).
bin=${IDEMPROXY_BIN:-./target/release/idemproxy}
if [ -z "${IDEMPROXY_BIN:-}" ]; then cargo build --release --quiet --bin idemproxy; fi
if [ "$fill" != 0 ]; then cargo build --release --quiet --example prefill; fi
mkdir -p "$bench_dir"
big="$bench_dir/ledger-$fill.redb"
if [ "$fill" != 0 ] && [ ! -f "$big" ]; then
  echo "bench: pre-filling $big with $fill operations (cached for later runs)" >&2
  rm -f "$big.tmp"
  ./target/release/examples/prefill "$big.tmp" "$fill"
  mv "$big.tmp" "$big"
fi

source bench/lib.sh

measured=$(nginx_workers upstream)
for c in $conns_list; do run upstream "$c" "http://127.0.0.1:$up_port/v1/ping"; done
measured=$(nginx_workers proxy)
for c in $conns_list; do run nginx-proxy "$c" "http://127.0.0.1:$ngx_port/v1/ping"; done

start_proxy empty; empty_ready=$ready_ms; measured=$proxy_pid
for c in $conns_list; do run passthrough "$c" "http://127.0.0.1:$proxy_port/bench/v1/ping"; done
for c in $conns_list; do run fresh "$c" "http://127.0.0.1:$proxy_port/bench/v1/refunds" "$work/fresh.lua" "c$c"; done
for c in $conns_list; do run replay "$c" "http://127.0.0.1:$proxy_port/bench/v1/refunds" "$work/same.lua"; done
empty_rss=$(peak_rss); stop_proxy

if [ "$fill" != 0 ]; then # N = 0 skips the big ledger
  start_proxy big "$big"; big_ready=$ready_ms; measured=$proxy_pid
  for c in $conns_list; do run replay-big "$c" "http://127.0.0.1:$proxy_port/bench/v1/refunds" "$work/same.lua"; done
  big_rss=$(peak_rss)
  for c in $conns_list; do run fresh-big "$c" "http://127.0.0.1:$proxy_port/bench/v1/refunds" "$work/fresh.lua" "b$c"; done
  big_write_rss=$(peak_rss); stop_proxy
fi

echo "idemproxy bench: $(nproc) cores, $(uname -r), wrk -t1 -d$duration, $(date -u +%FT%TZ)"
print_table nginx-proxy
echo "idemproxy, empty ledger:          ready in $empty_ready ms, peak RSS $empty_rss"
[ "$fill" = 0 ] ||
  echo "idemproxy, $fill-operation ledger: ready in $big_ready ms, peak RSS $big_rss after its replays, $big_write_rss after its fresh operations ($(du -h "$big" | cut -f1) file)"
