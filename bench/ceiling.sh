#!/usr/bin/env bash
# The most any store could give fresh operations: this build against the same build with a
# ledger whose writes cost nothing (bench/free-store.patch: no redb writes, no redo records, no
# fsync of the log; the operation records kept in a map so each claim and result is still
# decided on what the claim wrote). Everything else of a fresh operation stays: parsing,
# fingerprint, sealing the kept request, the writer's two round trips, the upstream exchange.
# A measurement only: the patched build keeps nothing and must never serve.
#
#   bench/ceiling.sh [ROUNDS] [CONNS]     defaults 4 and 64
#
# Builds HEAD (target/release) and HEAD with the patch applied in a temporary worktree
# (target/ceiling), then prints, each in alternating rounds (bench/ab.sh), fresh operations
# of both against nginx as a proxy and the patched build against HEAD, and where each spends
# its CPU per operation (bench/writer.sh). Needs what bench/ab.sh and bench/writer.sh need.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-4}; conns=${2:-64}
root=$(pwd)
tree=$(mktemp -d "${TMPDIR:-/tmp}/idemproxy-ceiling.XXXXXX")
cleanup() { git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf "$tree"; }
trap cleanup EXIT
git worktree add --detach --force "$tree" HEAD >/dev/null
git -C "$tree" apply "$root/bench/free-store.patch" ||
  { echo "ceiling: bench/free-store.patch no longer applies to HEAD; bring it up to date" >&2; exit 1; }
cargo build --release --quiet --bin idemproxy
(cd "$tree" && CARGO_TARGET_DIR="$root/target/ceiling" cargo build --release --quiet --bin idemproxy)
head_bin=$root/target/release/idemproxy
free_bin=$root/target/ceiling/release/idemproxy
echo "bench/ceiling.sh: $(nproc) cores, $conns connections, $rounds rounds, build $(git rev-parse --short HEAD), $(date -u +%FT%TZ)"
echo "== HEAD over nginx as a proxy"
bench/ab.sh nginx "$head_bin" fresh "$rounds" "$conns" | tail -1
echo "== free store over nginx as a proxy"
bench/ab.sh nginx "$free_bin" fresh "$rounds" "$conns" | tail -1
echo "== free store over HEAD"
bench/ab.sh "$head_bin" "$free_bin" fresh "$rounds" "$conns" | tail -1
echo "== HEAD, CPU per operation"
IDEMPROXY_BIN=$head_bin bench/writer.sh "$conns" | tail -5
echo "== free store, CPU per operation"
IDEMPROXY_BIN=$free_bin bench/writer.sh "$conns" | tail -5
