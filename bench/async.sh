#!/usr/bin/env bash
# bench/async.sh — async jobs against synchronous calls of the same API, in
# one run (issue: accept >= 1.0x and completion >= 0.7x the sync rate).
#
# One API, GET /hello on bench/cmd/backend, with "async": {} (mode prefer),
# so the same route answers a plain call synchronously and a call with
# Prefer: respond-async with 202 and a job. Two deployments, each with its
# own sync figure:
#
# serve   one `jetway serve` (default logging): edge, embedded NATS and the
#         worker in one process, so the worker runs jobs while the edge
#         accepts them — they share the two cores with wrk and the backend.
#   sync      wrk -t2 -c64 -d10s GET /hello                  -> calls/s
#   accept    the same with -H 'Prefer: respond-async'       -> 202s/s
#   complete  from the start of the accept run until every job it got
#             accepted has succeeded                          -> jobs/s
#
# split   nats-server (JetStream), `jetway edge` and `jetway worker` as
#         three processes — the production shape, where workers run beside
#         the edges, not inside them. The worker is stopped (SIGTERM)
#         while the edge accepts, so the accept rate is the edge's intake
#         alone; then a worker is started again and the drain of the queue
#         measured from its readiness. (Not SIGSTOP and SIGCONT: a stopped
#         worker's open pull is filled by the server all the same, and
#         those jobs wait out the 30 s ack wait once the pull has expired
#         in the resumed client — a pause of the bench, not of Jetway.)
#   sync      as above, through the edge and the worker      -> calls/s
#   accept    202s/s with no worker (jobs queue up in JetStream)
#   complete  jobs/s from the new worker's readiness until the queue is
#             empty
#
# Succeeded jobs are read from jetway_jobs_total{event="succeeded"} on the
# worker's /metrics. Each run starts with the queue empty. Prints each round
# and the ratios of the better round. No pinning, as in bench/run.sh.
#
# Needs: go, wrk, curl, python3 (free ports); as root it apt-installs wrk.
# The accept runs last ACCEPT_DURATION (5s): at this box's rates a 10 s
# run queues more than the 100,000 jobs one API tier may have waiting, and
# the refusals past that would be measured, not the intake.
# About two minutes. Env: THREADS CONNS DURATION ACCEPT_DURATION ROUNDS KEEP_TMP=1
set -euo pipefail

THREADS=${THREADS:-2}
CONNS=${CONNS:-64}
DURATION=${DURATION:-10s}
ACCEPT_DURATION=${ACCEPT_DURATION:-5s}
ROUNDS=${ROUNDS:-2}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
log() { printf '>> %s\n' "$*" >&2; }
die() { printf 'async.sh: %s\n' "$*" >&2; exit 1; }

if ! command -v wrk >/dev/null 2>&1; then
	if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
		apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
	else
		die "wrk is needed (apt-get install wrk)"
	fi
fi

tmp=$(mktemp -d /tmp/jetway-async.XXXXXX)
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ "${KEEP_TMP:-0}" = 1 ]; then log "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
P_BACKEND=$(port); P_EDGE=$(port); P_ADMIN=$(port); P_NATS=$(port)

wait_http() {
	local i
	for i in $(seq 1 600); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "$1" 2>/dev/null)" = 200 ] && return 0
		sleep 0.05
	done
	die "$1 did not answer 200 within 30s"
}

log "building jetway and the backend"
(cd "$repo" && go build -o "$tmp/jetway" ./cmd/jetway && go build -o "$tmp/backend" ./bench/cmd/backend &&
	go build -o "$tmp/nats-server" github.com/nats-io/nats-server/v2)

"$tmp/backend" --listen "127.0.0.1:$P_BACKEND" >"$tmp/backend.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$P_BACKEND/hello"
"$tmp/jetway" serve --data "$tmp/data" --nats-listen "127.0.0.1:$P_NATS" --listen "127.0.0.1:$P_EDGE" \
	--admin "127.0.0.1:$P_ADMIN" >"$tmp/serve.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$P_ADMIN/readyz"
cat >"$tmp/hello.json" <<EOF
{"name":"bench.async","pool":"bench","description":"bench/async.sh: GET /hello, sync or as a job",
 "route":{"method":"GET","path":"/hello"},
 "backend":{"type":"http","url":"http://127.0.0.1:$P_BACKEND/hello"},
 "timeout":"5s","concurrency":4096,"async":{}}
EOF
"$tmp/jetway" api put "$tmp/hello.json" --nats "nats://127.0.0.1:$P_NATS" >&2
wait_http "http://127.0.0.1:$P_EDGE/hello"
token=$(cat "$tmp/data/admin-token")

# succeeded ADMIN TOKEN: the succeeded jobs a worker counted so far.
succeeded() {
	curl -s ${2:+-H "Authorization: Bearer $2"} "http://127.0.0.1:$1/metrics" |
		awk '/^jetway_jobs_total\{api="bench.async",event="succeeded"/ {n+=$2} END {print n+0}'
}
rate() { awk '/^Requests\/sec:/ {printf "%d", $2}' "$1"; }
# accept_rate FILE: 202s per second (a refusal, 503 with a full queue, is no accept).
accept_rate() { awk -v n="$(accepted "$1")" '/requests in/ {sub(/s,?$/, "", $4); printf "%d", n / $4}' "$1"; }
count() { awk '/requests in/ {print $1}' "$1"; }
non2xx() { awk '/Non-2xx or 3xx responses:/ {n=$5} END {print n+0}' "$1"; }
accepted() { echo $(( $(count "$1") - $(non2xx "$1") )); }
wait_done() { # admin token target
	while [ "$(succeeded "$1" "${2:-}")" -lt "$3" ]; do sleep 0.05; done
}
load() { # url out [header]
	if [ -n "${3:-}" ]; then
		wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" -H "$3" "$1" >"$2"
	else
		wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" "$1" >"$2"
	fi
	[ "$(non2xx "$2")" = 0 ] || log "$(non2xx "$2") answers were not 2xx"
}

# --- the split deployment ----------------------------------------------------
P_SNATS=$(port); P_SEDGE=$(port); P_SEDGE_ADMIN=$(port); P_SWORKER_ADMIN=$(port)
"$tmp/nats-server" -a 127.0.0.1 -p "$P_SNATS" -js -sd "$tmp/split-nats" >"$tmp/split-nats.log" 2>&1 &
pids+=($!)
sleep 0.5
"$tmp/jetway" api put "$tmp/hello.json" --nats "nats://127.0.0.1:$P_SNATS" >&2
"$tmp/jetway" edge --nats "nats://127.0.0.1:$P_SNATS" --data "$tmp/split-edge" --listen "127.0.0.1:$P_SEDGE" \
	--admin "127.0.0.1:$P_SEDGE_ADMIN" >"$tmp/split-edge.log" 2>&1 &
pids+=($!)
start_worker() { # a split worker, ready; WORKER_PID
	"$tmp/jetway" worker --nats "nats://127.0.0.1:$P_SNATS" --data "$tmp/split-worker" --pool bench \
		--admin "127.0.0.1:$P_SWORKER_ADMIN" >>"$tmp/split-worker.log" 2>&1 &
	WORKER_PID=$!
	pids+=("$WORKER_PID")
	wait_http "http://127.0.0.1:$P_SWORKER_ADMIN/readyz"
}
start_worker
wait_http "http://127.0.0.1:$P_SEDGE/hello"
wtoken=$(cat "$tmp/split-worker/admin-token" 2>/dev/null || true) # a worker on loopback may have none

log "warm-up"
for target in "$P_EDGE $P_ADMIN $token" "$P_SEDGE $P_SWORKER_ADMIN ${wtoken:-}"; do
	set -- $target
	DURATION=3s load "http://127.0.0.1:$1/hello" "$tmp/warm.txt"
	before=$(succeeded "$2" "${3:-}")
	DURATION=3s load "http://127.0.0.1:$1/hello" "$tmp/warm.txt" 'Prefer: respond-async'
	wait_done "$2" "${3:-}" $((before + $(accepted "$tmp/warm.txt")))
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
declare -A best
better() { if awk -v a="$2" -v b="${best[$1]:-0}" 'BEGIN {exit !(a > b)}'; then best[$1]=$2; fi; }
printf '%-6s %-6s %10s %12s %12s %8s %8s\n' target round sync/s accept/s complete/s accept-x complete-x
for r in $(seq 1 "$ROUNDS"); do
	# serve: everything at once.
	load "http://127.0.0.1:$P_EDGE/hello" "$tmp/sync.txt"
	sync=$(rate "$tmp/sync.txt")
	before=$(succeeded "$P_ADMIN" "$token")
	start=$(date +%s.%N)
	DURATION=$ACCEPT_DURATION load "http://127.0.0.1:$P_EDGE/hello" "$tmp/accept.txt" 'Prefer: respond-async'
	accept=$(accept_rate "$tmp/accept.txt")
	n=$(accepted "$tmp/accept.txt")
	wait_done "$P_ADMIN" "$token" $((before + n))
	complete=$(awk -v n="$n" -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%d", n / (b - a)}')
	printf '%-6s %-6s %10s %12s %12s %8s %8s\n' serve "$r" "$sync" "$accept" "$complete" "$(ratio "$accept" "$sync")" "$(ratio "$complete" "$sync")"
	better serve-accept "$(ratio "$accept" "$sync")"
	better serve-complete "$(ratio "$complete" "$sync")"

	# split: the edge's intake with the worker stopped, then the drain.
	load "http://127.0.0.1:$P_SEDGE/hello" "$tmp/sync.txt"
	sync=$(rate "$tmp/sync.txt")
	kill "$WORKER_PID"
	wait "$WORKER_PID" 2>/dev/null || true
	DURATION=$ACCEPT_DURATION load "http://127.0.0.1:$P_SEDGE/hello" "$tmp/accept.txt" 'Prefer: respond-async'
	accept=$(accept_rate "$tmp/accept.txt")
	n=$(accepted "$tmp/accept.txt")
	start_worker # its counters start at 0
	start=$(date +%s.%N)
	wait_done "$P_SWORKER_ADMIN" "${wtoken:-}" "$n"
	complete=$(awk -v n="$n" -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%d", n / (b - a)}')
	printf '%-6s %-6s %10s %12s %12s %8s %8s\n' split "$r" "$sync" "$accept" "$complete" "$(ratio "$accept" "$sync")" "$(ratio "$complete" "$sync")"
	better split-accept "$(ratio "$accept" "$sync")"
	better split-complete "$(ratio "$complete" "$sync")"
done
printf '\nbest rounds: serve accept/sync %s, completion/sync %s; split accept/sync %s, completion/sync %s (targets 1.0 and 0.7)\n' \
	"${best[serve-accept]}" "${best[serve-complete]}" "${best[split-accept]}" "${best[split-complete]}"
