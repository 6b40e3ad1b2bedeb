#!/usr/bin/env bash
# bench/soak.sh — does `jetway serve` stay flat under a long mixed load?
#
# Starts bench/cmd/backend and `jetway serve` with its default logging (the
# access log to a file) and publishes four APIs:
#   GET  /soak/hello    the backend's /hello
#   POST /soak/echo     the backend's /echo (a 1 KiB body)
#   GET  /soak/keyed    key auth and a per-app limit of 200/s (some 429s)
#   GET  /soak/slow     a backend that is not there (connection refused ->
#                       BAD_GATEWAY after retries)
# and drives them for DURATION (10m) with three wrk loads at once: a mixed
# keep-alive load over all four plus unrouted paths (404) (-c32), a churn
# load that opens a new connection per request (-c4, Connection: close),
# and nothing else. Every SAMPLE (10s) it records the serve process's RSS,
# its live heap (HeapAlloc right after a GC it forces through
# /debug/pprof/heap?gc=1), goroutines and open file descriptors.
#
# Verdict: after a WARM (1m) warm-up, the largest RSS, live heap,
# goroutine count and fd count of the last minute must be within 10 %
# (goroutines and fds: or +32) of the largest of the first minute after
# warm-up; it prints the series and "flat" or what grew, and exits 1 if
# something grew.
#
# Needs go, wrk, curl. Env: DURATION WARM SAMPLE KEEP_TMP=1
set -euo pipefail
DURATION=${DURATION:-10m}
WARM=${WARM:-1m}
SAMPLE=${SAMPLE:-10}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
command -v wrk >/dev/null || { echo "soak.sh: wrk is needed (apt-get install wrk)" >&2; exit 1; }

secs() { # a duration like 90s, 10m, 1h -> seconds
	case "$1" in
	*h) echo $((${1%h} * 3600)) ;;
	*m) echo $((${1%m} * 60)) ;;
	*s) echo "${1%s}" ;;
	*) echo "$1" ;;
	esac
}
total=$(secs "$DURATION")
warm=$(secs "$WARM")
[ "$total" -gt $((warm + 120)) ] || { echo "soak.sh: DURATION must exceed WARM by 2 minutes" >&2; exit 2; }

tmp=$(mktemp -d /tmp/jetway-soak.XXXXXX)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ "${KEEP_TMP:-0}" = 1 ]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
		echo $((20000 + RANDOM % 30000))
}
P_BACKEND=$(port) P_EDGE=$(port) P_ADMIN=$(port) P_NATS=$(port) P_DEAD=$(port)
wait_http() {
	for _ in $(seq 1 200); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' ${2:+-H "$2"} "$1")" = 200 ] && return 0
		sleep 0.05
	done
	echo "soak.sh: $1 did not answer 200" >&2
	exit 1
}

(cd "$repo" && go build -o "$tmp/backend" ./bench/cmd/backend && go build -o "$tmp/jetway" ./cmd/jetway)
"$tmp/backend" --listen "127.0.0.1:$P_BACKEND" 2>"$tmp/backend.log" &
pids+=($!)
wait_http "http://127.0.0.1:$P_BACKEND/hello"
"$tmp/jetway" serve --listen "127.0.0.1:$P_EDGE" --admin "127.0.0.1:$P_ADMIN" --pprof \
	--nats-listen "127.0.0.1:$P_NATS" --data "$tmp/data" >"$tmp/jetway.log" 2>&1 &
pids+=($!)
JETWAY_PID=$!
wait_http "http://127.0.0.1:$P_ADMIN/readyz"
NATS="nats://127.0.0.1:$P_NATS"
put() { echo "$1" | "$tmp/jetway" api put - --nats "$NATS" >/dev/null; }
B="http://127.0.0.1:$P_BACKEND"
put '{"name":"soak.hello","pool":"soak","route":{"method":"GET","path":"/soak/hello"},"backend":{"type":"http","url":"'"$B"'/hello"},"concurrency":4096}'
put '{"name":"soak.echo","pool":"soak","route":{"method":"POST","path":"/soak/echo"},"backend":{"type":"http","url":"'"$B"'/echo"},"concurrency":4096}'
put '{"name":"soak.keyed","pool":"soak","route":{"method":"GET","path":"/soak/keyed"},"backend":{"type":"http","url":"'"$B"'/hello"},
      "auth":{"methods":["key"]},"rate_limits":[{"key":["app"],"limit":200,"window":"1s"}],"concurrency":4096}'
put '{"name":"soak.slow","pool":"soak","route":{"method":"GET","path":"/soak/slow"},"backend":{"type":"http","url":"http://127.0.0.1:'"$P_DEAD"'/x"},
      "timeout":"300ms","retry":{"attempts":2,"on":["connect"]},"concurrency":4096}'
KEY=$("$tmp/jetway" app create soak --api 'soak.*' --nats "$NATS" | sed -n 's/^API key (shown once, store it now): //p')
wait_http "http://127.0.0.1:$P_EDGE/soak/hello"
wait_http "http://127.0.0.1:$P_EDGE/soak/keyed" "X-Api-Key: $KEY"

# The mixed load: each wrk thread walks the list in turn. The requests are
# made in init, once wrk.headers has the Host header.
cat >"$tmp/mixed.lua" <<EOF
local reqs
local i = 0
init = function(args)
  local body = string.rep("x", 1024)
  reqs = {
    wrk.format("GET", "/soak/hello"),
    wrk.format("POST", "/soak/echo", {["Content-Type"] = "text/plain"}, body),
    wrk.format("GET", "/soak/keyed", {["X-Api-Key"] = "$KEY"}),
    wrk.format("GET", "/soak/hello"),
    wrk.format("GET", "/soak/slow"),
    wrk.format("GET", "/soak/nowhere"),
  }
end
request = function()
  i = i % #reqs + 1
  return reqs[i]
end
EOF
E="http://127.0.0.1:$P_EDGE"
wrk -t1 -c32 -d"${total}s" -s "$tmp/mixed.lua" "$E/" >"$tmp/wrk-mixed.txt" 2>&1 &
pids+=($!)
wrk -t1 -c4 -d"${total}s" -H "Connection: close" "$E/soak/hello" >"$tmp/wrk-churn.txt" 2>&1 &
pids+=($!)

sample() { # -> "rss_kib heap_kib goroutines fds"
	local rss heap g f
	rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$JETWAY_PID/status")
	heap=$(curl -s "http://127.0.0.1:$P_ADMIN/debug/pprof/heap?gc=1&debug=1" | awk '$2 == "HeapAlloc" {printf "%d", $4 / 1024}')
	g=$(curl -s "http://127.0.0.1:$P_ADMIN/debug/pprof/goroutine?debug=1" | sed -n 's/^goroutine profile: total //p')
	f=$(find "/proc/$JETWAY_PID/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
	echo "$rss ${heap:-0} ${g:-0} $f"
}
echo "soak: $DURATION of mixed load (warm-up $WARM), a sample every ${SAMPLE}s" >&2
printf '%8s %10s %10s %11s %6s\n' t rss_kib heap_kib goroutines fds >"$tmp/series.txt"
start=$(date +%s)
while :; do
	now=$(date +%s)
	t=$((now - start))
	[ "$t" -ge "$total" ] && break
	kill -0 "$JETWAY_PID" 2>/dev/null || { echo "soak.sh: jetway exited (see $tmp/jetway.log)" >&2; tail -20 "$tmp/jetway.log" >&2; exit 1; }
	read -r rss heap g f < <(sample)
	printf '%8d %10d %10d %11d %6d\n' "$t" "$rss" "$heap" "$g" "$f" >>"$tmp/series.txt"
	sleep "$SAMPLE"
done
wait "${pids[-1]}" "${pids[-2]}" 2>/dev/null || true

cat "$tmp/series.txt"
echo
echo "mixed load:"; grep -E 'requests in|Requests/sec|Non-2xx|Socket errors' "$tmp/wrk-mixed.txt" || true
echo "churn load (a connection per request):"; grep -E 'requests in|Requests/sec|Non-2xx|Socket errors' "$tmp/wrk-churn.txt" || true
echo
awk -v warm="$warm" -v end="$total" 'NR > 1 {
	t = $1
	if (t >= warm && t < warm + 60) { for (i = 2; i <= 5; i++) if ($i > first[i]) first[i] = $i }
	if (t >= end - 60)               { for (i = 2; i <= 5; i++) if ($i > last[i]) last[i] = $i }
} END {
	split("rss_kib heap_kib goroutines fds", name, " ")
	grew = 0
	for (i = 2; i <= 5; i++) {
		allow = first[i] * 1.10
		if (i > 3 && first[i] + 32 > allow) allow = first[i] + 32
		verdict = (last[i] <= allow) ? "flat" : "GREW"
		if (verdict == "GREW") grew = 1
		printf "%-11s first minute after warm-up max %d, last minute max %d: %s\n", name[i-1], first[i], last[i], verdict
	}
	exit grew
}' "$tmp/series.txt"
