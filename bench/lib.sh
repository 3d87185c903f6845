# What bench/run.sh and bench/pg.sh share, sourced by both after they set duration, conns_list,
# workers and bench_dir: the tools, a work dir removed at exit (with the nginx and idemproxy
# processes started here; a caller may define cleanup_more), the nginx upstream and reverse proxy,
# the wrk scripts (copied from bench/*.lua), start_proxy/stop_proxy, `run` (one wrk per URL, with the CPU time of the
# processes in $measured) and print_table.
command -v wrk >/dev/null || { echo "bench: wrk is not installed (apt-get install wrk)" >&2; exit 1; }
if ! command -v nginx >/dev/null; then
  echo "bench: installing nginx-light from the OS packages" >&2
  apt-get install -y nginx-light >/dev/null
fi

work=$(mktemp -d "$PWD/$bench_dir/run.XXXXXX")
pids=()
cleanup() {
  for f in "$work"/nginx-*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if declare -F cleanup_more >/dev/null; then cleanup_more; fi
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

# The wrk scripts (bench/fresh.lua: a new operation per request; bench/same.lua: replays).
cp bench/fresh.lua bench/same.lua "$work/"

# Set by the caller before start_proxy: ledger_url (a postgres:// URL instead of ledger.redb) and
# proxy_extra (more proxy.toml, e.g. a [replicas] table).
ledger_url=${ledger_url:-}; proxy_extra=${proxy_extra:-}
proxy_pid=""; proxy_port=""; ready_ms=""
start_proxy() { # dir [ledger to copy in]
  local dir="$work/$1"; mkdir -p "$dir/policies"
  [ -n "${2:-}" ] && cp "$2" "$dir/ledger.redb"
  proxy_port=$(free_port)
  cat > "$dir/proxy.toml" <<TOML
listen = "127.0.0.1:$proxy_port"
admin_listen = "127.0.0.1:$(free_port)"
ledger = "${ledger_url:-ledger.redb}"
$proxy_extra
TOML
  sed "s|@UPSTREAM@|http://127.0.0.1:$up_port|" bench/policy.toml > "$dir/policies/bench.toml"
  sync
  local t0; t0=$(date +%s%N)
  "${bin:-./target/release/idemproxy}" serve -c "$dir/proxy.toml" > "$dir/ready" 2> "$dir/proxy.log" &
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
# "user system": the clock ticks the processes PIDS... spent in user space and in the kernel.
user_system_ticks() { local u=0 s=0 p a b; for p in "$@"; do
  read -r a b < <(awk '{print $14, $15}' "/proc/$p/stat"); u=$((u + a)); s=$((s + b)); done
  echo "$u $s"; }
# shellcheck disable=SC2086
ticks() { local u s; read -r u s < <(user_system_ticks $measured); echo $((u + s)); }
nginx_workers() { pgrep -P "$(cat "$work/nginx-$1.pid")" | tr '\n' ' '; }
declare -A rps_of
rows=()
# One wrk per URL at once (URLS: space-separated, the connections split evenly between them, the
# script's argument suffixed by the URL's index): the sum of their requests and req/s, the worst
# of their percentiles.
run() { # name conns urls [script [script args]]
  local name=$1 c=$2 script=${4:-} urls=() wrks=() i out t0 reqs=0 rps=0 p50=0 p99=0 errs=0 cpu
  read -ra urls <<<"$3"
  [ "$c" -lt "${#urls[@]}" ] && urls=("${urls[@]:0:$c}") # fewer connections than URLs: the first
  local per=$(( c / ${#urls[@]} ))
  t0=$(ticks)
  for i in "${!urls[@]}"; do
    timeout 120 wrk -t1 -c"$per" -d"$duration" --latency ${script:+-s "$script"} "${urls[$i]}" \
      ${5:+-- "$5.$i"} > "$work/wrk.$i" &
    wrks+=($!)
  done
  for i in "${wrks[@]}"; do wait "$i" || { echo "bench: wrk failed" >&2; exit 1; }; done
  for i in "${!urls[@]}"; do
    out=$(cat "$work/wrk.$i")
    reqs=$(( reqs + $(awk '/requests in/ {print $1}' <<<"$out") ))
    rps=$(( rps + $(awk '/Requests\/sec/ {printf "%.0f", $2}' <<<"$out") ))
    p50=$(awk -v a="$p50" -v b="$(awk '$1=="50%" {print $2}' <<<"$out" | to_ms)" 'BEGIN{print (b>a)?b:a}')
    p99=$(awk -v a="$p99" -v b="$(awk '$1=="99%" {print $2}' <<<"$out" | to_ms)" 'BEGIN{print (b>a)?b:a}')
    errs=$(( errs + $(awk '/Non-2xx/ {s+=$NF} /Socket errors/ {gsub(/,/,""); s+=$4+$6+$8+$10} END {print s+0}' <<<"$out") ))
  done
  cpu=$(awk -v t="$(( $(ticks) - t0 ))" -v hz="$(getconf CLK_TCK)" -v n="$reqs" \
    'BEGIN{printf "%.1f", n ? t / hz * 1e6 / n : 0}')
  rps_of[$name/$c]=$rps; last_reqs=$reqs
  rows+=("$name $c $rps $p50 $p99 $errs $cpu")
}

# The table of every run so far; ratios to the scenario named $1 at the same connection count.
print_table() { # baseline-scenario
  echo "| scenario | conns | req/s | p50 ms | p99 ms | errors | vs $1 | CPU µs/req |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  local r name c rps p50 p99 errs cpu ratio
  for r in "${rows[@]}"; do
    read -r name c rps p50 p99 errs cpu <<<"$r"
    ratio=$(awk -v a="$rps" -v b="${rps_of[$1/$c]:-0}" 'BEGIN{printf "%.2f", b ? a/b : 0}')
    echo "| $name | $c | $rps | $p50 | $p99 | $errs | $ratio | $cpu |"
  done
}
