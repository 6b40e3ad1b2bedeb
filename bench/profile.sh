#!/usr/bin/env bash
# bench/profile.sh — where Jetway spends CPU under load.
#
# Starts bench/cmd/backend and `jetway serve --pprof` (Go's profiler on the
# admin listener) with GET /hello published, drives it with
# wrk -t2 -c64 for 13s, takes a 10s CPU profile in the middle, and prints
# go tool pprof's top 25 (flat, then cumulative). The profile is kept in
# $OUT (default /tmp/jetway-cpu.pprof) for `go tool pprof -http`.
# ASYNC=1 makes the API async and sends every call with
# Prefer: respond-async: the profile is then of accepting jobs and running
# them in the same process (bench/async.sh's serve figure).
# No CPU pinning (as run.sh). Needs go, wrk, curl.
set -euo pipefail
OUT=${OUT:-/tmp/jetway-cpu.pprof}
ASYNC=${ASYNC:-0}
async_field='' prefer=()
if [ "$ASYNC" = 1 ]; then async_field=',"async":{}' prefer=(-H 'Prefer: respond-async'); fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
command -v wrk >/dev/null || { echo "profile.sh: wrk is needed (apt-get install wrk)" >&2; exit 1; }

tmp=$(mktemp -d /tmp/jetway-prof.XXXXXX)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port() { # a free loopback port, from the kernel
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
		echo $((20000 + RANDOM % 30000))
}
P_BACKEND=$(port) P_EDGE=$(port) P_PPROF=$(port) P_NATS=$(port)
wait_http() {
	for _ in $(seq 1 200); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "$1")" = 200 ] && return 0
		sleep 0.05
	done
	echo "profile.sh: $1 did not answer 200" >&2
	exit 1
}

(cd "$repo" && go build -o "$tmp/backend" ./bench/cmd/backend && go build -o "$tmp/jetway" ./cmd/jetway)
"$tmp/backend" --listen "127.0.0.1:$P_BACKEND" 2>"$tmp/backend.log" &
pids+=($!)
wait_http "http://127.0.0.1:$P_BACKEND/hello"
"$tmp/jetway" serve --listen "127.0.0.1:$P_EDGE" --admin "127.0.0.1:$P_PPROF" --pprof \
	--nats-listen "127.0.0.1:$P_NATS" --data "$tmp/data" --log-level warn 2>"$tmp/jetway.log" &
pids+=($!)
wait_http "http://127.0.0.1:$P_PPROF/healthz"
for _ in $(seq 1 100); do
	echo '{"name":"bench.hello","pool":"bench","route":{"method":"GET","path":"/hello"},"concurrency":4096,
	  "backend":{"type":"http","url":"http://127.0.0.1:'"$P_BACKEND"'/hello"}'"$async_field"'}' |
		"$tmp/jetway" api put - --nats "nats://127.0.0.1:$P_NATS" >/dev/null 2>&1 && break
	sleep 0.1
done
wait_http "http://127.0.0.1:$P_EDGE/hello"

wrk -t2 -c64 -d13s --latency "${prefer[@]}" "http://127.0.0.1:$P_EDGE/hello" >"$tmp/wrk.txt" &
pids+=($!)
sleep 1.5
curl -s -o "$OUT" "http://127.0.0.1:$P_PPROF/debug/pprof/profile?seconds=10"
wait "${pids[-1]}" || true
grep -E 'Requests/sec|50%|99%|Non-2xx' "$tmp/wrk.txt" || true
echo "profile: $OUT"
echo "=== top 25 flat ==="
go tool pprof -top -nodecount=25 "$tmp/jetway" "$OUT" 2>/dev/null
echo "=== top 25 cumulative ==="
go tool pprof -top -cum -nodecount=25 "$tmp/jetway" "$OUT" 2>/dev/null
