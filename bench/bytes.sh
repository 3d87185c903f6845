#!/usr/bin/env bash
# Bytes per completed operation on the redb ledger: fills a fresh ledger with N operations
# through the real proxy (examples/fill.rs, CONC requests at a time, to the nginx upstream)
# and prints, per operation, the ledger file's size after a graceful stop (its length, and the
# disk blocks it takes: redb grows a file by doubling it, sparse) and the bytes the proxy
# process wrote meanwhile (write_bytes of /proc/PID/io, read before its stop).
#
#   bench/bytes.sh [N] [CONC]           # defaults 20000 and 64
#   BYTES_BASELINE=PATH also measures that binary first (e.g. a build of main), in the same run
#   BYTES_KEEP=DIR keeps each filled ledger there (DIR/baseline.redb, DIR/this.redb)
#
# Builds the release binary and the fill example first; IDEMPROXY_BIN=PATH measures that binary
# instead, unbuilt.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20000}; conns=${2:-64}
duration=1s; conns_list=$conns; workers=$(nproc); bench_dir=target/bench
mkdir -p "$bench_dir"
if [ -z "${IDEMPROXY_BIN:-}" ]; then
  cargo build --release --locked --bin idemproxy --example fill >&2
else
  cargo build --release --locked --example fill >&2
fi
fill=${CARGO_TARGET_DIR:-target}/release/examples/fill
source bench/lib.sh

written() { awk '/^write_bytes/ {print $2}' "/proc/$proxy_pid/io"; }
measure() { # label binary
  bin=$2
  start_proxy "$1"
  local before after size blocks
  before=$(written)
  "$fill" "http://127.0.0.1:$proxy_port/bench/v1/refunds" "$n" "$conns" "$1"
  after=$(written)
  stop_proxy
  size=$(stat -c %s "$work/$1/ledger.redb"); blocks=$(stat -c '%b * %B' "$work/$1/ledger.redb")
  [ -n "${BYTES_KEEP:-}" ] && cp "$work/$1/ledger.redb" "$BYTES_KEEP/$1.redb"
  awk -v l="$1" -v n="$n" -v s="$size" -v b="$((blocks))" -v w="$((after - before))" 'BEGIN {
    printf "%-8s %7d ops  file %10d B, %5.0f B/op  on disk %10d B, %5.0f B/op  written %5.0f B/op\n",
      l, n, s, s / n, b, b / n, w / n }'
}
[ -n "${BYTES_BASELINE:-}" ] && measure baseline "$BYTES_BASELINE"
measure this "${IDEMPROXY_BIN:-${CARGO_TARGET_DIR:-target}/release/idemproxy}"
