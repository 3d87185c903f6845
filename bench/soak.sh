#!/usr/bin/env bash
# A bounded soak: a mixed guarded load at 64 connections for MINUTES minutes against one
# idemproxy on a redb ledger, sampled every minute.
#
#   bench/soak.sh [MINUTES]          default 30
#
# The load, all at once, each a wrk (-t1) restarted every minute:
#   fresh      40 connections, a new operation per request (bench/fresh.lua) to the nginx upstream
#   replay     12 connections, one succeeded operation again and again (bench/same.lua)
#   duplicate   8 connections, each operation four times at once (bench/dup.lua)
#   unknown     4 connections, a new operation per request to bench/slow_upstream.py, which holds
#               each first request 1 s against the policy's 200 ms timeout: every one is
#               `202 outcome-unknown`, and the settler re-sends it with its key (the slow
#               upstream answers a re-send at once) until it is `succeeded`.
# Every minute it prints the minute's req/s and p99 of the fresh, replay and duplicate loads,
# the proxy's RSS and open file descriptors, the ledger file's size, the operations by state
# (GET /stats) and the ledger's bytes per operation. At the end: the drift of RSS, descriptors and
# fresh p99 between minutes 5-7 and the last three (the soak's target is within 10 %), how many
# unknowns are left after the load stops and the settler has had 10 s, and the slow upstream's
# distinct keys against the unknown operations sent (one key per operation, on every attempt).
# Builds the release binary unless IDEMPROXY_BIN names one.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
duration=60s; conns_list=64; workers=$(nproc); bench_dir=target/bench
mkdir -p "$bench_dir"
if [ -z "${IDEMPROXY_BIN:-}" ]; then cargo build --release --quiet --bin idemproxy; fi
bin=${IDEMPROXY_BIN:-./target/release/idemproxy}
source bench/lib.sh
cp bench/dup.lua "$work/"

slow_port=$(free_port)
python3 bench/slow_upstream.py "$slow_port" 1.0 "$work/slow.json" &
slow_pid=$!; pids+=("$slow_pid")
mkdir -p "$work/soak/policies"
cat > "$work/soak/policies/slow.toml" <<TOML
[provider]
name = "slow"
upstream = "http://127.0.0.1:$slow_port"
mount = "/slow"
dedupe = "key"
timeout = "200ms"

[[route]]
name = "charge"
match = "POST /v1/charges"
operation_id = ["{header:x-operation-id}"]
TOML
start_proxy soak
admin=$(awk -F'"' '/^admin_listen/ {print $2}' "$work/soak/proxy.toml")
base="http://127.0.0.1:$proxy_port"
cat > "$work/slow.lua" <<'LUA'
local prefix, n = "u", 0
init = function(args) prefix = args[1] or prefix end
request = function()
  n = n + 1
  return wrk.format("POST", "/slow/v1/charges",
    {["x-operation-id"] = prefix .. "-" .. n, ["content-type"] = "application/json"}, '{"amount":1}')
end
LUA

fds() { ls "/proc/$proxy_pid/fd" | wc -l; }
rss_mib() { awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$proxy_pid/status"; }
stats() { curl -sf "http://$admin/stats"; }
state_count() { python3 -c 'import json,sys; print(json.load(sys.stdin)["by_state"][sys.argv[1]])' "$1"; }
p99_of() { awk '$1=="99%" {print $2}' "$1" | to_ms; }
rps_of_file() { awk '/Requests\/sec/ {printf "%.0f", $2}' "$1"; }
errors_of() { awk '/Non-2xx/ {s+=$NF} /Socket errors/ {gsub(/,/,""); s+=$4+$6+$8+$10} END {print s+0}' "$1"; }

echo "| minute | fresh req/s | fresh p99 ms | replay p99 ms | dup p99 ms | unknown sent | RSS MiB | fds | ledger MB | succeeded | unknown | bytes/op |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
samples="$work/samples"; : > "$samples"
for m in $(seq "$minutes"); do
  timeout 120 wrk -t1 -c40 -d"$duration" --latency -s "$work/fresh.lua" "$base/bench/v1/refunds" -- "f$m" > "$work/fresh.out" &
  a=$!
  timeout 120 wrk -t1 -c12 -d"$duration" --latency -s "$work/same.lua" "$base/bench/v1/refunds" > "$work/same.out" &
  b=$!
  timeout 120 wrk -t1 -c8 -d"$duration" --latency -s "$work/dup.lua" "$base/bench/v1/refunds" -- "d$m" > "$work/dup.out" &
  c=$!
  timeout 120 wrk -t1 -c4 -d"$duration" --timeout 5s -s "$work/slow.lua" "$base/slow/v1/charges" -- "u$m" > "$work/slow.out" &
  d=$!
  wait $a $b $c $d
  s=$(stats)
  succeeded=$(state_count succeeded <<<"$s"); unknown=$(state_count unknown <<<"$s")
  size=$(stat -c %s "$work/soak/ledger.redb")
  row="$m $(rps_of_file "$work/fresh.out") $(p99_of "$work/fresh.out") $(p99_of "$work/same.out") \
$(p99_of "$work/dup.out") $(awk '/requests in/ {print $1}' "$work/slow.out") $(rss_mib) $(fds) \
$(awk -v b="$size" 'BEGIN{printf "%.1f", b/1e6}') $succeeded $unknown \
$(awk -v b="$size" -v n="$succeeded" 'BEGIN{printf "%.0f", n ? b/n : 0}')"
  echo "$row" >> "$samples"
  errs=$(( $(errors_of "$work/fresh.out") + $(errors_of "$work/same.out") + $(errors_of "$work/dup.out") ))
  # shellcheck disable=SC2086
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' $row
  [ "$errs" -eq 0 ] || echo "soak: minute $m: $errs errors (non-2xx or socket) in fresh/replay/duplicate" >&2
done

# The settler's last word: no new unknowns, 10 s for it to finish the ones left.
sleep 10
left=$(stats | state_count unknown)
kill "$slow_pid"; wait "$slow_pid" 2>/dev/null || true
echo
python3 - "$samples" "$minutes" "$left" "$work/slow.json" <<'PY'
import json, sys
rows = [l.split() for l in open(sys.argv[1])]
minutes, left = int(sys.argv[2]), int(sys.argv[3])
slow = json.load(open(sys.argv[4]))
col = {"fresh p99": 2, "RSS": 6, "fds": 7}
if minutes >= 10:
    for name, i in col.items():
        early = sum(float(r[i]) for r in rows[4:7]) / 3
        late = sum(float(r[i]) for r in rows[-3:]) / 3
        print(f"drift of {name}, minutes 5-7 to the last three: {early:.1f} -> {late:.1f} "
              f"({(late / early - 1) * 100:+.1f} %)")
else:
    print("drift: needs at least 10 minutes")
print(f"ledger bytes per succeeded operation: minute 1 {rows[0][11]}, last {rows[-1][11]}")
print(f"unknown operations left 10 s after the load: {left}")
sent = sum(int(r[5]) for r in rows)
print(f"slow upstream: {slow['effects']} distinct keys (effects) for {sent} operations answered "
      f"202 to the agents, {slow['resends']} re-sends with a key already seen")
PY
