#!/usr/bin/env bash
# Measures idemproxy against a direct baseline in the same run on this machine (loopback only).
#
#   bench/run.sh [DURATION] [CONNECTIONS]      e.g. bench/run.sh 10s 32
#
# Upstream: nginx answering a fixed JSON body. Scenarios, each measured with wrk:
#   direct      wrk -> nginx                                   (the baseline)
#   passthrough wrk -> idemproxy (unguarded route) -> nginx
#   guarded     wrk -> idemproxy (new operation per request: two durable commits) -> nginx
#   replay      wrk -> idemproxy (same operation every time: answered from the ledger)
# Prints requests/s, p50 and p99 per scenario and each one's throughput as a ratio of direct.
# Needs wrk and nginx (Debian packages `wrk`, `nginx-light` or `nginx`).
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-10s}
conns=${2:-32}
threads=2

for tool in wrk nginx; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is not installed (apt-get install wrk nginx-light)" >&2; exit 1; }
done
cargo build --release --quiet

work=$(mktemp -d)
cleanup() {
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  [ -n "${proxy_pid:-}" ] && kill "$proxy_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up_port=$(free_port); proxy_port=$(free_port); admin_port=$(free_port)

cat > "$work/nginx.conf" <<NGINX
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work/body;
  proxy_temp_path $work/proxy;
  fastcgi_temp_path $work/fastcgi;
  uwsgi_temp_path $work/uwsgi;
  scgi_temp_path $work/scgi;
  server {
    listen 127.0.0.1:$up_port;
    keepalive_requests 1000000;
    location / {
      default_type application/json;
      return 200 '{"id":"re_1","object":"refund","amount":100}';
    }
  }
}
NGINX
nginx -c "$work/nginx.conf"

mkdir -p "$work/policies"
cat > "$work/proxy.toml" <<TOML
listen = "127.0.0.1:$proxy_port"
admin_listen = "127.0.0.1:$admin_port"
ledger = "ledger.redb"
TOML
cat > "$work/policies/bench.toml" <<TOML
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
IDEMPROXY_LOG=warn ./target/release/idemproxy serve -c "$work/proxy.toml" > "$work/ready" 2> "$work/proxy.log" &
proxy_pid=$!
for _ in $(seq 100); do grep -q ready "$work/ready" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$work/ready" || { cat "$work/proxy.log"; exit 1; }

cat > "$work/new.lua" <<'LUA'
local n = 0
local tid = 0
setup = function(thread) thread:set("tid", tid); tid = tid + 1 end
request = function()
  n = n + 1
  return wrk.format("POST", "/bench/v1/refunds",
    {["x-operation-id"] = "t" .. tid .. "-" .. n, ["content-type"] = "application/json"},
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
curl -sf -o /dev/null -X POST -H 'x-operation-id: replayed-op' -H 'content-type: application/json' \
  -d '{"amount":100,"currency":"usd"}' "http://127.0.0.1:$proxy_port/bench/v1/refunds"

run() { # name conns url [script]
  local name=$1 c=$2 url=$3 script=${4:-}
  local out
  out=$(wrk -t"$threads" -c"$c" -d"$duration" --latency ${script:+-s "$script"} "$url")
  local rps p50 p99
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  if grep -q "Non-2xx" <<<"$out"; then echo "bench: $name had non-2xx answers:" >&2; echo "$out" >&2; fi
  echo "$name $rps $p50 $p99"
}

results=()
results+=("$(run direct "$conns" "http://127.0.0.1:$up_port/v1/ping")")
results+=("$(run passthrough "$conns" "http://127.0.0.1:$proxy_port/bench/v1/ping")")
results+=("$(run guarded "$conns" "http://127.0.0.1:$proxy_port/bench/v1/refunds" "$work/new.lua")")
results+=("$(run replay "$conns" "http://127.0.0.1:$proxy_port/bench/v1/refunds" "$work/same.lua")")

echo "idemproxy bench: $(nproc) cores, wrk -t$threads -c$conns -d$duration, $(date -u +%FT%TZ)"
base=$(awk '{print $2}' <<<"${results[0]}")
printf '%-12s %12s %10s %10s %10s\n' scenario req/s p50 p99 vs-direct
for r in "${results[@]}"; do
  read -r name rps p50 p99 <<<"$r"
  printf '%-12s %12s %10s %10s %10s\n' "$name" "$rps" "$p50" "$p99" "$(awk -v a="$rps" -v b="$base" 'BEGIN{printf "%.3f", a/b}')"
done
