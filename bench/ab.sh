#!/usr/bin/env bash
# Two builds of idemproxy side by side: each round starts build A, then build B, on a fresh
# ledger and measures one scenario with wrk (-t1, CONNS connections, 5 s, after a 1 s warm-up),
# so the machine's drift from minute to minute falls on both alike. Prints req/s, p50, the
# proxy's CPU time per request and its peak RSS for every run, then B's medians over A's (req/s,
# CPU per request, p50).
#
#   bench/ab.sh BIN_A BIN_B [SCENARIO] [ROUNDS] [CONNS]
#       SCENARIO: replay (default), fresh or pass; ROUNDS default 3; CONNS default 64
#   AB_LEDGER=PATH starts each run on a copy of that ledger (e.g. target/bench/ledger-1000000.redb
#   from bench/run.sh) instead of an empty one; AB_LEDGER_A and AB_LEDGER_B do so for one side
#   only: `AB_LEDGER_B=target/bench/ledger-1000000.redb bench/ab.sh BIN BIN replay 6` is the
#   big ledger's replays over the empty ledger's, in alternating rounds.
#   BIN_A = nginx measures nginx as a reverse proxy on side A instead, as bench/run.sh's
#   nginx-proxy rows do (GET /v1/ping through it to the same upstream, whatever the scenario):
#   `bench/ab.sh nginx ./target/release/idemproxy pass 6` is a target of bench/run.sh in
#   alternating rounds, each ratio taken between runs a few seconds apart.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,17p' "$0" >&2; exit 2; }
bin_a=$1; bin_b=$2; scenario=${3:-replay}; rounds=${4:-3}; conns=${5:-64}
duration=5s; conns_list=$conns; workers=$(nproc); bench_dir=target/bench
mkdir -p "$bench_dir"
case $scenario in
  replay | fresh | pass) ;;
  *) echo "ab: unknown scenario $scenario" >&2; exit 2 ;;
esac
source bench/lib.sh

declare -A cpu_of reqs_of p50_of p99_of
for round in $(seq "$rounds"); do
  for side in A B; do
    if [ "$side" = A ]; then
      bin=$bin_a; ledger=${AB_LEDGER_A:-${AB_LEDGER:-}}
    else
      bin=$bin_b; ledger=${AB_LEDGER_B:-${AB_LEDGER:-}}
    fi
    if [ "$bin" = nginx ]; then
      measured=$(nginx_workers proxy)
      url="http://127.0.0.1:$ngx_port/v1/ping"; script=""; arg=""
    else
      start_proxy "$side$round" ${ledger:+"$ledger"}
      measured=$proxy_pid
      base="http://127.0.0.1:$proxy_port/bench"
      case $scenario in
        replay) url="$base/v1/refunds"; script="$work/same.lua"; arg="" ;;
        fresh) url="$base/v1/refunds"; script="$work/fresh.lua"; arg="$side$round" ;;
        pass) url="$base/v1/ping"; script=""; arg="" ;;
      esac
    fi
    wrk -t1 -c"$conns" -d1s ${script:+-s "$script"} "$url" ${arg:+-- "warm$arg"} >/dev/null
    run "$side" "$conns" "$url" "$script" "$arg"
    read -r _ _ rps p50 p99 errs cpu <<<"${rows[-1]}"
    if [ "$bin" = nginx ]; then rss=-; else rss=$(peak_rss); fi
    if [ "$bin" = nginx ]; then on=""; else
      on="  on $(du -h --apparent-size "$work/$side$round/ledger.redb" | cut -f1) of ledger"; fi
    printf '%s round %d: %7d req/s  p50 %5.2f ms  p99 %6.2f ms  %6.1f µs CPU/req  %d errors  peak RSS %s%s\n' \
      "$side" "$round" "$rps" "$p50" "$p99" "$cpu" "$errs" "$rss" "$on"
    reqs_of[$side]+="$rps "; cpu_of[$side]+="$cpu "; p50_of[$side]+="$p50 "; p99_of[$side]+="$p99 "
    if [ "$bin" != nginx ]; then
      stop_proxy
      rm -f "$work/$side$round/ledger.redb"
    fi
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
awk -v ra="$(median <<<"${reqs_of[A]}")" -v rb="$(median <<<"${reqs_of[B]}")" \
    -v ca="$(median <<<"${cpu_of[A]}")" -v cb="$(median <<<"${cpu_of[B]}")" \
    -v pa="$(median <<<"${p50_of[A]}")" -v pb="$(median <<<"${p50_of[B]}")" \
    -v qa="$(median <<<"${p99_of[A]}")" -v qb="$(median <<<"${p99_of[B]}")" -v s="$scenario" -v c="$conns" \
  'BEGIN {printf "%s at %d connections, B over A (medians): req/s %.3f, CPU per request %.3f, p50 %.2f vs %.2f ms, p99 %.2f vs %.2f ms\n", s, c, rb/ra, cb/ca, pb, pa, qb, qa}'
