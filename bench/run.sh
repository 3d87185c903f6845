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
# Prints req/s, p50, p99, errors (non-2xx or socket errors), the ratio to nginx-proxy at the
# same connection count, and the CPU time the server under test spent per request (its
# processes' user + system time over the run; "upstream" is the upstream nginx itself); then each idemproxy's start-up time (launch to ready line) and peak RSS
# (VmHWM) after its runs. The N-operation ledger is made once by `examples/prefill.rs` and
# cached as target/bench/ledger-N.redb; each run works on a copy, removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-5s}
fill=${2:-1000000}
conns_list=${BENCH_CONNS:-"1 16 64 256"} # BENCH_CONNS="64" for a quick look
workers=$(nproc) # idemproxy's tokio runtime has one worker thread per core; nginx gets as many
bench_dir=target/bench

command -v wrk >/dev/null || { echo "bench: wrk is not installed (apt-get install wrk)" >&2; exit 1; }
if ! command -v nginx >/dev/null; then
  echo "bench: installing nginx-light from the OS packages" >&2
  apt-get install -y nginx-light >/dev/null
fi
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

work=$(mktemp -d "$PWD/$bench_dir/run.XXXXXX")
pids=()
cleanup() {
  for f in "$work"/nginx-*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up_port=$(free_port); ngx_port=$(free_port)

nginx_conf() { # name port location-body
  mkdir -p "$work/$1"
  cat > "$work/$1.conf" <<NGINX
worker_processes $workers;
pid $work/nginx-$1.pid;
error_log $work/$1/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/$1/body;
  proxy_temp_path $work/$1/proxy;
  fastcgi_temp_path $work/$1/fastcgi;
  uwsgi_temp_path $work/$1/uwsgi;
  scgi_temp_path $work/$1/scgi;
  keepalive_requests 1000000;
  upstream up { server 127.0.0.1:$up_port; keepalive 256; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:$2;
    location / { $3 }
  }
}
NGINX
  nginx -c "$work/$1.conf"
}
nginx_conf upstream "$up_port" \
  "default_type application/json; return 200 '{\"id\":\"re_1\",\"object\":\"refund\",\"amount\":100}';"
nginx_conf proxy "$ngx_port" \
  'proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection "";'

cat > "$work/fresh.lua" <<'LUA'
local prefix, n = "x", 0
init = function(args) prefix = args[1] end
request = function()
  n = n + 1
  return wrk.format("POST", "/bench/v1/refunds",
    {["x-operation-id"] = prefix .. "-" .. n, ["content-type"] = "application/json"},
    '{"amount":100,"currency":"usd"}')
end
LUA
cat > "$work/same.lua" <<'LUA'
request = function()
  return wrk.format("POST", "/bench/v1/refunds",
    {["x-operation-id"] = "replayed-op", ["content-type"] = "application/json"},
    '{"amount":100,"currency":"usd"}')
end
LUA

proxy_pid=""; proxy_port=""; ready_ms=""
start_proxy() { # dir [ledger to copy in]
  local dir="$work/$1"; mkdir -p "$dir/policies"
  [ -n "${2:-}" ] && cp "$2" "$dir/ledger.redb"
  proxy_port=$(free_port)
  cat > "$dir/proxy.toml" <<TOML
listen = "127.0.0.1:$proxy_port"
admin_listen = "127.0.0.1:$(free_port)"
ledger = "ledger.redb"
TOML
  cat > "$dir/policies/bench.toml" <<TOML
[provider]
name = "bench"
upstream = "http://127.0.0.1:$up_port"
mount = "/bench"
dedupe = "key"

[[route]]
name = "refund"
match = "POST /v1/refunds"
operation_id = ["{header:x-operation-id}"]
TOML
  sync
  local t0; t0=$(date +%s%N)
  "$bin" serve -c "$dir/proxy.toml" > "$dir/ready" 2> "$dir/proxy.log" &
  proxy_pid=$!; pids+=("$proxy_pid")
  for _ in $(seq 6000); do grep -q ready "$dir/ready" 2>/dev/null && break; sleep 0.005; done
  grep -q ready "$dir/ready" || { echo "bench: $1 did not start" >&2; cat "$dir/proxy.log" >&2; exit 1; }
  ready_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  curl -sf -o /dev/null -X POST -H 'x-operation-id: replayed-op' -H 'content-type: application/json' \
    -d '{"amount":100,"currency":"usd"}' "http://127.0.0.1:$proxy_port/bench/v1/refunds"
}
stop_proxy() { kill "$proxy_pid"; wait "$proxy_pid" || true; }
peak_rss() { awk '/VmHWM/ {printf "%.1f MiB", $2/1024}' "/proc/$proxy_pid/status"; }

to_ms() { awk '{v=$1; u=v; sub(/[0-9.]+/,"",u); sub(/[a-z]+$/,"",v);
  if (u=="us") v/=1000; else if (u=="s") v*=1000; else if (u=="m") v*=60000; printf "%.2f", v}'; }
# CPU time (user + system, in clock ticks) of the processes in $measured: the proxy under test.
# CPU per request does not depend on what else the machine runs, unlike req/s.
measured=""
ticks() { local t=0 p; for p in $measured; do
  t=$(( t + $(awk '{print $14 + $15}' "/proc/$p/stat") )); done; echo "$t"; }
nginx_workers() { pgrep -P "$(cat "$work/nginx-$1.pid")" | tr '\n' ' '; }
declare -A rps_of
rows=()
run() { # name conns url [script [script args]]
  local name=$1 c=$2 url=$3 script=${4:-} out rps p50 p99 errs t0 reqs cpu
  t0=$(ticks)
  out=$(timeout 120 wrk -t1 -c"$c" -d"$duration" --latency ${script:+-s "$script"} "$url" ${5:+-- "$5"})
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  cpu=$(awk -v t="$(( $(ticks) - t0 ))" -v hz="$(getconf CLK_TCK)" -v n="$reqs" \
    'BEGIN{printf "%.1f", n ? t / hz * 1e6 / n : 0}')
  rps=$(awk '/Requests\/sec/ {printf "%.0f", $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out" | to_ms)
  p99=$(awk '$1=="99%" {print $2}' <<<"$out" | to_ms)
  errs=$(awk '/Non-2xx/ {s+=$NF} /Socket errors/ {gsub(/,/,""); s+=$4+$6+$8+$10} END {print s+0}' <<<"$out")
  rps_of[$name/$c]=$rps
  rows+=("$name $c $rps $p50 $p99 $errs $cpu")
}

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
  big_rss=$(peak_rss); stop_proxy
fi

echo "idemproxy bench: $(nproc) cores, $(uname -r), wrk -t1 -d$duration, $(date -u +%FT%TZ)"
echo "| scenario | conns | req/s | p50 ms | p99 ms | errors | vs nginx-proxy | CPU µs/req |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for r in "${rows[@]}"; do
  read -r name c rps p50 p99 errs cpu <<<"$r"
  ratio=$(awk -v a="$rps" -v b="${rps_of[nginx-proxy/$c]}" 'BEGIN{printf "%.2f", a/b}')
  echo "| $name | $c | $rps | $p50 | $p99 | $errs | $ratio | $cpu |"
done
echo "idemproxy, empty ledger:          ready in $empty_ready ms, peak RSS $empty_rss"
[ "$fill" = 0 ] ||
  echo "idemproxy, $fill-operation ledger: ready in $big_ready ms, peak RSS $big_rss ($(du -h "$big" | cut -f1) file)"
