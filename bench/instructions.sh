#!/usr/bin/env bash
# User-space instructions per request, counted by valgrind's callgrind: a figure that does not
# move with the machine's load, for comparing two builds of idemproxy (and nginx as a proxy).
#
#   bench/instructions.sh [SCENARIO...]     scenarios: pass replay fresh nginx (default: all)
#                                           (IDEMPROXY_BIN=PATH measures that binary, unbuilt;
#                                           INSTRUCTIONS_KEEP=DIR keeps each scenario's dumps
#                                           in DIR/SCENARIO for callgrind_annotate)
#
# Each scenario starts an nginx upstream answering a small JSON body, the server under test
# under callgrind, warms it with wrk for 2 s, zeroes the counts, runs wrk (-t1 -c8) for 8 s,
# dumps the counts and divides the total by the requests wrk counted. Loopback only.
# Counted per thread (--separate-threads), idemproxy's total is also split between the threads
# serving the agents' connections ("workers": the shards, or an older build's tokio workers),
# the ledger's writer thread and the rest (the main thread, blocking pool): told apart by a
# function only that thread runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scenarios=${*:-pass replay fresh nginx}
for tool in wrk valgrind callgrind_control nginx; do
  command -v "$tool" >/dev/null || { echo "instructions: $tool is missing (apt-get install wrk valgrind nginx-light)" >&2; exit 1; }
done
bin=${IDEMPROXY_BIN:-./target/release/idemproxy}
if [ -z "${IDEMPROXY_BIN:-}" ]; then cargo build --release --quiet --bin idemproxy; fi
work=$(mktemp -d "${TMPDIR:-/tmp}/idemproxy-instructions.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$work/up.pid" ] && kill "$(cat "$work/up.pid")" 2>/dev/null
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up=$(free_port); px=$(free_port); adm=$(free_port)
temps="client_body_temp_path $work/b; proxy_temp_path $work/p; fastcgi_temp_path $work/f; uwsgi_temp_path $work/u; scgi_temp_path $work/s;"
cat > "$work/up.conf" <<NGINX
worker_processes 1; pid $work/up.pid; error_log $work/up.err;
events { worker_connections 4096; }
http { access_log off; $temps keepalive_requests 1000000;
  server { listen 127.0.0.1:$up; location / { default_type application/json;
    return 200 '{"id":"re_1","object":"refund","amount":100}'; } } }
NGINX
cat > "$work/proxy.conf" <<NGINX
daemon off; master_process off; worker_processes 1; pid $work/px.pid; error_log $work/px.err;
events { worker_connections 4096; }
http { access_log off; $temps keepalive_requests 1000000;
  upstream up { server 127.0.0.1:$up; keepalive 256; keepalive_requests 1000000; }
  server { listen 127.0.0.1:$px; location / { proxy_pass http://up; proxy_http_version 1.1;
    proxy_set_header Connection ""; } } }
NGINX
nginx -c "$work/up.conf"
mkdir -p "$work/policies"
cat > "$work/proxy.toml" <<TOML
listen = "127.0.0.1:$px"
admin_listen = "127.0.0.1:$adm"
ledger = "ledger.redb"
TOML
sed "s|@UPSTREAM@|http://127.0.0.1:$up|" bench/policy.toml > "$work/policies/bench.toml"
cp bench/fresh.lua bench/same.lua "$work/"

measure() { # name url [script]
  local name=$1 url=$2 script=${3:-} n total
  # Its own ID prefix per run: the measured run's fresh operations are not the warm-up's.
  wrk -t1 -c8 -d2s ${script:+-s "$script"} "$url" ${script:+-- warm} >/dev/null
  # By PID: without it, callgrind_control zeroes and dumps every callgrind process on the machine.
  callgrind_control -z "$pid" >/dev/null 2>&1
  n=$(wrk -t1 -c8 -d8s ${script:+-s "$script"} "$url" ${script:+-- run} | awk '/requests in/ {print $1}')
  callgrind_control -d "$pid" >/dev/null 2>&1
  sleep 1
  local f group workers=0 writer=0 other=0
  for f in "$work"/cg.out.*; do
    group=other
    if grep -qE 'multi_thread::worker::Context::run_task|idemproxy::server::serve_conn::\{\{closure\}\}' "$f"; then group=workers
    elif grep -q '=([0-9]*) idemproxy::ledger::writer::run$' "$f"; then group=writer; fi
    printf -v "$group" '%d' $((${!group} + $(awk '/^(summary|totals):/ {print $2; exit}' "$f")))
  done
  total=$((workers + writer + other))
  if [ -n "${INSTRUCTIONS_KEEP:-}" ]; then
    mkdir -p "$INSTRUCTIONS_KEEP/$name" && cp "$work"/cg.out.* "$INSTRUCTIONS_KEEP/$name/"
  fi
  printf '%-8s %8d requests  %8d instructions per request\n' "$name" "$n" $((total / n))
  if [ "$name" != nginx ]; then
    printf '%-8s workers %8d  writer %8d  other %6d  instructions per request\n' \
      "$name" $((workers / n)) $((writer / n)) $((other / n))
  fi
}

for s in $scenarios; do
  rm -f "$work"/cg.out* "$work"/ledger.redb*
  if [ "$s" = nginx ]; then
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/cg.out" nginx -c "$work/proxy.conf" 2>/dev/null &
  else
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/cg.out" \
      "$bin" serve -c "$work/proxy.toml" > "$work/ready" 2>/dev/null &
  fi
  pid=$!; pids+=("$pid")
  for _ in $(seq 150); do
    curl -s -o /dev/null "http://127.0.0.1:$px/" 2>/dev/null && break; sleep 0.2
  done
  case $s in
    pass) measure pass "http://127.0.0.1:$px/bench/v1/ping" ;;
    replay)
      curl -sf -o /dev/null -X POST -H 'x-operation-id: replayed-op' -H 'content-type: application/json' \
        -d '{"amount":100,"currency":"usd"}' "http://127.0.0.1:$px/bench/v1/refunds"
      measure replay "http://127.0.0.1:$px/bench/v1/refunds" "$work/same.lua" ;;
    fresh) measure fresh "http://127.0.0.1:$px/bench/v1/refunds" "$work/fresh.lua" ;;
    nginx) measure nginx "http://127.0.0.1:$px/v1/ping" ;;
    *) echo "instructions: unknown scenario $s" >&2; exit 2 ;;
  esac
  kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
done
