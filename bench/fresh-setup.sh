# What bench/writer.sh and bench/profile.sh share, sourced with the script's arguments after it
# sets $name: CONNS from $1 (default 64), a 6 s measured run, the binary ($IDEMPROXY_BIN, else
# the release build, built), bench/lib.sh, then idemproxy started as $name and warmed with 2 s
# of fresh operations; $url is the guarded route.
conns=${1:-64}
duration=6s; conns_list=$conns; workers=$(nproc); bench_dir=target/bench
bin=${IDEMPROXY_BIN:-./target/release/idemproxy}
if [ -z "${IDEMPROXY_BIN:-}" ]; then cargo build --release --quiet --bin idemproxy; fi
mkdir -p "$bench_dir"
source bench/lib.sh

start_proxy "$name"
url="http://127.0.0.1:$proxy_port/bench/v1/refunds"
wrk -t1 -c"$conns" -d2s -s "$work/fresh.lua" "$url" -- warm >/dev/null
