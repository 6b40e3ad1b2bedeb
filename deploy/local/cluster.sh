#!/usr/bin/env bash
# cluster.sh — a local multi-process Jetway cluster, for trying things.
#
# Starts, all on 127.0.0.1:
#   serve     `jetway serve --demo`: embedded NATS with JetStream, an edge,
#             workers for every pool, the demo backend and the demo APIs
#   edge-1    `jetway edge`  (a second edge)
#   edge-2    `jetway edge`  (a third edge)
#   worker-1  `jetway worker --pool demo`
#   worker-2  `jetway worker --pool demo`
# every one pointing at the NATS of serve, each with its own --data folder,
# logs in a temporary folder. Waits until every /readyz answers 200, prints
# how to try it, and stops everything (SIGTERM, graceful drain) on Ctrl-C.
#
# Usage:
#   deploy/local/cluster.sh
#   JETWAY=/path/to/jetway deploy/local/cluster.sh   # use this binary instead of building one
#   PORT_OFFSET=10000 deploy/local/cluster.sh         # every port + 10000 (18080, 14222, ...)
#
# Ports (each can also be set on its own, e.g. EDGE1_PORT=9000):
#   NATS_PORT 4222   SERVE_PORT 8080   SERVE_ADMIN 8081
#   EDGE1_PORT 8090  EDGE1_ADMIN 8190  EDGE2_PORT 8091  EDGE2_ADMIN 8191
#   WORKER1_ADMIN 8290  WORKER2_ADMIN 8291
set -euo pipefail
# Job control puts every process in its own process group: Ctrl-C reaches
# this script only, which then stops the processes in order.
set -m

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

off=${PORT_OFFSET:-0}
NATS_PORT=${NATS_PORT:-$((4222 + off))}
SERVE_PORT=${SERVE_PORT:-$((8080 + off))}
SERVE_ADMIN=${SERVE_ADMIN:-$((8081 + off))}
EDGE1_PORT=${EDGE1_PORT:-$((8090 + off))}
EDGE1_ADMIN=${EDGE1_ADMIN:-$((8190 + off))}
EDGE2_PORT=${EDGE2_PORT:-$((8091 + off))}
EDGE2_ADMIN=${EDGE2_ADMIN:-$((8191 + off))}
WORKER1_ADMIN=${WORKER1_ADMIN:-$((8290 + off))}
WORKER2_ADMIN=${WORKER2_ADMIN:-$((8291 + off))}
READY_TIMEOUT=${READY_TIMEOUT:-30}

work=$(mktemp -d "${TMPDIR:-/tmp}/jetway-cluster.XXXXXX")
logs=$work/logs
mkdir -p "$logs"

say() { printf '%s\n' "$*"; }
die() { printf 'cluster.sh: %s\n' "$*" >&2; exit 1; }

# --- processes --------------------------------------------------------------
names=()
pids=()
stopping=0

pid_of() {
	local i
	for i in "${!names[@]}"; do
		[[ ${names[i]} == "$1" ]] && printf '%s' "${pids[i]}"
	done
	return 0
}

# term_wait PID... sends SIGTERM to each and waits for all (SIGKILL after 15s).
term_wait() {
	local pid
	for pid in "$@"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "$@"; do
		for _ in $(seq 1 150); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			say "  pid $pid did not stop in 15s; killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
		wait "$pid" 2>/dev/null || true
	done
}

stop_all() {
	((stopping)) && return 0
	stopping=1
	trap - INT TERM
	if ((${#pids[@]} == 0)); then
		rm -rf "$work"
		return 0
	fi
	say ""
	say "stopping (SIGTERM, graceful drain) ..."
	# Edges and workers first, then serve, which holds NATS.
	local i others=()
	for i in "${!names[@]}"; do
		[[ ${names[i]} == serve ]] || others+=("${pids[i]}")
	done
	((${#others[@]} == 0)) || term_wait "${others[@]}"
	term_wait "$(pid_of serve)"
	say "stopped. Logs and data are kept in $work (rm -rf it when done)."
}
trap 'stop_all; exit 130' INT TERM
trap 'stop_all' EXIT

command -v curl >/dev/null || die "curl is needed"

# --- the binary -------------------------------------------------------------
if [[ -n "${JETWAY:-}" ]]; then
	[[ -x "$JETWAY" ]] || die "JETWAY=$JETWAY is not an executable file"
	bin=$JETWAY
else
	command -v go >/dev/null || die "go is needed to build jetway (or set JETWAY=/path/to/jetway)"
	bin=$work/bin/jetway
	say "building jetway into $bin ..."
	(cd "$repo" && go build -o "$bin" ./cmd/jetway) || die "go build failed"
fi

# --- ports must be free -----------------------------------------------------
port_busy() {
	# A connect that succeeds means something already listens there.
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
for p in "$NATS_PORT" "$SERVE_PORT" "$SERVE_ADMIN" "$EDGE1_PORT" "$EDGE1_ADMIN" \
	"$EDGE2_PORT" "$EDGE2_ADMIN" "$WORKER1_ADMIN" "$WORKER2_ADMIN"; do
	if port_busy "$p"; then
		die "port $p on 127.0.0.1 is in use; stop what uses it or set PORT_OFFSET (see the top of this script)"
	fi
done

# --- processes --------------------------------------------------------------
# start NAME ARGS... runs "$bin ARGS..." in the background, logging to
# $logs/NAME.log. JETWAY_NATS_URL is cleared so that serve always embeds
# its NATS and the others use the --nats given here.
start() {
	local name=$1
	shift
	env -u JETWAY_NATS_URL "$bin" "$@" >"$logs/$name.log" 2>&1 &
	names+=("$name")
	pids+=("$!")
}

# wait_ready NAME ADMIN_PORT waits until http://127.0.0.1:PORT/readyz is 200.
wait_ready() {
	local name=$1 port=$2 pid
	pid=$(pid_of "$name")
	local deadline=$((SECONDS + READY_TIMEOUT))
	while ((SECONDS < deadline)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			say "$name exited; the end of $logs/$name.log:" >&2
			tail -n 20 "$logs/$name.log" >&2
			exit 1
		fi
		if [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz") == 200 ]]; then
			printf '  %-9s ready   (pid %s, admin 127.0.0.1:%s)\n' "$name" "$pid" "$port"
			return 0
		fi
		sleep 0.2
	done
	say "$name not ready after ${READY_TIMEOUT}s: $(curl -s "http://127.0.0.1:$port/readyz")" >&2
	tail -n 20 "$logs/$name.log" >&2
	exit 1
}

nats_url=nats://127.0.0.1:$NATS_PORT

say "starting the cluster in $work ..."
start serve serve --demo --nats= \
	--nats-listen "127.0.0.1:$NATS_PORT" \
	--listen "127.0.0.1:$SERVE_PORT" --admin "127.0.0.1:$SERVE_ADMIN" \
	--data "$work/data/serve" --drain-timeout 5s
wait_ready serve "$SERVE_ADMIN"

start edge-1 edge --nats "$nats_url" \
	--listen "127.0.0.1:$EDGE1_PORT" --admin "127.0.0.1:$EDGE1_ADMIN" \
	--data "$work/data/edge-1" --drain-timeout 5s
start edge-2 edge --nats "$nats_url" \
	--listen "127.0.0.1:$EDGE2_PORT" --admin "127.0.0.1:$EDGE2_ADMIN" \
	--data "$work/data/edge-2" --drain-timeout 5s
start worker-1 worker --nats "$nats_url" --pool demo \
	--admin "127.0.0.1:$WORKER1_ADMIN" \
	--data "$work/data/worker-1" --drain-timeout 5s
start worker-2 worker --nats "$nats_url" --pool demo \
	--admin "127.0.0.1:$WORKER2_ADMIN" \
	--data "$work/data/worker-2" --drain-timeout 5s
wait_ready edge-1 "$EDGE1_ADMIN"
wait_ready edge-2 "$EDGE2_ADMIN"
wait_ready worker-1 "$WORKER1_ADMIN"
wait_ready worker-2 "$WORKER2_ADMIN"

# The demo APIs are published by serve once it is up; wait until every edge
# routes them.
for port in "$SERVE_PORT" "$EDGE1_PORT" "$EDGE2_PORT"; do
	deadline=$((SECONDS + READY_TIMEOUT))
	until [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/hello/world") == 200 ]]; do
		((SECONDS < deadline)) || die "edge on port $port does not serve /v1/hello/world; see $logs"
		sleep 0.2
	done
done

cat <<EOF

Jetway cluster is up.

  process   pid      HTTP             admin (/healthz, /readyz)
  serve     $(printf '%-8s' "$(pid_of serve)") 127.0.0.1:$SERVE_PORT   127.0.0.1:$SERVE_ADMIN    (+ NATS $nats_url)
  edge-1    $(printf '%-8s' "$(pid_of edge-1)") 127.0.0.1:$EDGE1_PORT   127.0.0.1:$EDGE1_ADMIN
  edge-2    $(printf '%-8s' "$(pid_of edge-2)") 127.0.0.1:$EDGE2_PORT   127.0.0.1:$EDGE2_ADMIN
  worker-1  $(printf '%-8s' "$(pid_of worker-1)") -                127.0.0.1:$WORKER1_ADMIN   pool demo
  worker-2  $(printf '%-8s' "$(pid_of worker-2)") -                127.0.0.1:$WORKER2_ADMIN   pool demo

Logs: $logs   (tail -f $logs/*.log)

Try it — every edge serves every API:
  curl -i http://127.0.0.1:$SERVE_PORT/v1/hello/world
  curl -i http://127.0.0.1:$EDGE1_PORT/v1/hello/world
  curl -i http://127.0.0.1:$EDGE2_PORT/v1/hello/world
  curl -i -X POST -d 'hi' http://127.0.0.1:$EDGE1_PORT/v1/echo
  curl -i http://127.0.0.1:$EDGE2_PORT/v1/slow          # 504 GATEWAY_TIMEOUT after 300ms
  curl -s http://127.0.0.1:$EDGE1_ADMIN/readyz

Kill a worker; the demo pool keeps serving (the other worker, and serve,
which runs workers for every pool, are in its queue group):
  kill $(pid_of worker-1)
  for i in \$(seq 10); do curl -s -o /dev/null -w '%{http_code} ' http://127.0.0.1:$EDGE1_PORT/v1/hello/world; done; echo

Publish an API; every edge routes it within a fraction of a second:
  export JETWAY_NATS_URL=$nats_url
  $bin api put $repo/examples/apis/orders.get.sandbox.yaml
  curl -i http://127.0.0.1:$EDGE2_PORT/sandbox/v1/orders/1
  $bin api list

Ctrl-C stops everything.
EOF

# Wait until Ctrl-C. A process that exits (a worker you killed) does not end
# the cluster.
while :; do
	sleep 1 &
	wait $! || true
done
