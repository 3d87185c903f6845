#!/usr/bin/env bash
# Guarded requests on a PostgreSQL ledger beside the redb ledger, in one run on this machine.
#
#   bench/pg.sh [DURATION]          e.g. bench/pg.sh 5s (the default; BENCH_CONNS="16 64" the
#                                   connection counts, default "1 16 64"; BENCH_LEDGERS="redb pg1"
#                                   and BENCH_KINDS=fresh run only those rows, for a quick look)
#
# Needs wrk, nginx (installed if missing) and PostgreSQL on 127.0.0.1:5432 (user postgres, trust
# authentication); makes a fresh database idemproxy_bench_<pid>, dropped at exit. Upstream: the
# nginx of bench/run.sh answering a fixed JSON body. Each scenario runs wrk (-t1, DURATION) at
# each connection count:
#   redb-fresh / redb-replay   one idemproxy on a redb file (the figures of bench/run.sh)
#   pg1-fresh  / pg1-replay    one idemproxy on the PostgreSQL ledger
#   pg2-fresh  / pg2-replay    two idemproxy replicas on that one database, one wrk each with half
#                              the connections (req/s summed, the worse p50/p99 of the two; at
#                              1 connection only the first replica is driven)
# fresh: a new operation ID per request; replay: one succeeded operation again and again. The
# ratio column is to redb at the same connection count; CPU µs/req is the idemproxy processes'
# user + system time over the requests; PostgreSQL's own CPU per request is the last column.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-5s}
conns_list=${BENCH_CONNS:-"1 16 64"}
ledgers=" ${BENCH_LEDGERS:-redb pg1 pg2} "
kinds=${BENCH_KINDS:-"fresh replay"}
workers=$(nproc)
bench_dir=target/bench

pg_isready -q -h 127.0.0.1 -p 5432 || {
  echo "bench: PostgreSQL does not answer on 127.0.0.1:5432; start it (sudo service postgresql start)" >&2
  exit 1
}
cargo build --release --quiet --bin idemproxy
mkdir -p "$bench_dir"
database=idemproxy_bench_$$
cleanup_more() { dropdb -h 127.0.0.1 -U postgres --if-exists --force "$database" 2>/dev/null || true; }
source bench/lib.sh
createdb -h 127.0.0.1 -U postgres "$database"
IDEMPROXY_SECRET=$(openssl rand -hex 32)
export IDEMPROXY_SECRET

# PostgreSQL's CPU for this run only: its backends serving this database (other databases on the
# server may be busy) and its WAL writer, checkpointer and background writer. Ticks per pid.
pg_pids() { psql -h 127.0.0.1 -U postgres -d "$database" -tAc "SELECT pid FROM pg_stat_activity
  WHERE datname = current_database() OR backend_type IN ('walwriter', 'checkpointer', 'background writer')"; }
pid_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
declare -A pg_start
pg_mark() { local p; pg_start=(); for p in $(pg_pids); do pg_start[$p]=$(pid_ticks "$p"); done; }
pg_spent() { local t=0 p; for p in $(pg_pids); do
  t=$(( t + $(pid_ticks "$p") - ${pg_start[$p]:-0} )); done; echo "$t"; }
pg_cpu_of=()

scenarios() { # prefix urls...
  local prefix=$1 c kind script refunds=() u; shift
  for u in "$@"; do refunds+=("$u/bench/v1/refunds"); done
  for kind in $kinds; do
    for c in $conns_list; do
      script="$work/fresh.lua"; [ "$kind" = replay ] && script="$work/same.lua"
      pg_mark
      run "$prefix-$kind" "$c" "${refunds[*]}" "$script" "$prefix$c"
      pg_cpu_of+=("$(pg_spent) $last_reqs")
    done
  done
}

if [[ $ledgers == *" redb "* ]]; then
  start_proxy redb; measured=$proxy_pid
  scenarios redb "http://127.0.0.1:$proxy_port"
  stop_proxy
fi

ledger_url="postgres://postgres@127.0.0.1:5432/$database?sslmode=disable"
proxy_extra=$'[replicas]\nlease = "10s"'
if [[ $ledgers == *" pg1 "* ]]; then
  start_proxy pg1; measured=$proxy_pid
  scenarios pg1 "http://127.0.0.1:$proxy_port"
  stop_proxy
fi

if [[ $ledgers == *" pg2 "* ]]; then
  start_proxy pg2a; first_pid=$proxy_pid; first_port=$proxy_port
  start_proxy pg2b; measured="$first_pid $proxy_pid"
  scenarios pg2 "http://127.0.0.1:$first_port" "http://127.0.0.1:$proxy_port"
  kill "$first_pid"; wait "$first_pid" || true
  stop_proxy
fi

echo "idemproxy on PostgreSQL: $(nproc) cores, $(uname -r), $(psql -h 127.0.0.1 -U postgres -d "$database" -tAc 'SHOW server_version'), wrk -t1 -d$duration, $(date -u +%FT%TZ)"
echo "| scenario | conns | req/s | p50 ms | p99 ms | errors | vs redb | CPU µs/req | PostgreSQL CPU µs/req |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
hz=$(getconf CLK_TCK)
for i in "${!rows[@]}"; do
  read -r name c rps p50 p99 errs cpu <<<"${rows[$i]}"
  read -r pg_t reqs <<<"${pg_cpu_of[$i]}"
  base=${rps_of[redb-${name#*-}/$c]:-0}
  ratio=$(awk -v a="$rps" -v b="$base" 'BEGIN{printf "%.2f", b ? a/b : 0}')
  pg_us=$(awk -v t="$pg_t" -v hz="$hz" -v n="$reqs" 'BEGIN{printf "%.1f", n ? t / hz * 1e6 / n : 0}')
  echo "| $name | $c | $rps | $p50 | $p99 | $errs | $ratio | $cpu | $pg_us |"
done
echo "(PostgreSQL CPU: the user + system time of the server processes serving this database, and of"
echo " its WAL writer, checkpointer and background writer, over the requests; in the redb rows only"
echo " those writers, serving the rest of the server.)"
