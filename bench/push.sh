#!/usr/bin/env bash
# Push figures (docs/push.md, issue "Push notifications"): `jetway serve`
# pinned to core 0, bench/cmd/pushbench pinned to core 1, in one run:
# idle WebSocket (and raw TCP) connections held and their memory, new authenticated
# connections per second, broadcast of one topic to SUBS subscribers (and
# again with one that never reads), durable unique messages HTTP publish →
# client, and resume after 100 missed messages.
#
#   bash bench/push.sh        # CONNS=15000 SUBS=10000 MSGS=200 RATE=10000 KEEP_TMP=1
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
CONNS=${CONNS:-15000}
SUBS=${SUBS:-10000}
MSGS=${MSGS:-200}
RATE=${RATE:-10000}
log() { printf '>> %s\n' "$*" >&2; }
die() { printf 'push.sh: %s\n' "$*" >&2; exit 1; }
command -v taskset >/dev/null || die "taskset (util-linux) is needed"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
[ "$(ulimit -n)" -ge $((CONNS + 1000)) ] || die "the open-file limit ($(ulimit -n)) is below CONNS+1000"
tmp=$(mktemp -d /tmp/jetway-push.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[ -n "${KEEP_TMP:-}" ] && log "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "building jetway and pushbench"
(cd "$repo" && go build -o "$tmp/jetway" ./cmd/jetway && go build -o "$tmp/pushbench" ./bench/cmd/pushbench)

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
P_EDGE=$(port); P_ADMIN=$(port); P_NATS=$(port); P_TCP=$(port)
NATS="nats://127.0.0.1:$P_NATS"
EDGE="http://127.0.0.1:$P_EDGE"
MAXC=$(( (CONNS > SUBS ? CONNS : SUBS) + 2000 ))
# No connect-rate cap (its default is 5000/s): the figure is the edge's own.
serve() {
	taskset -c 0 "$tmp/jetway" serve --data "$tmp/data" --log-level warn --max-conns "$MAXC" --push-connect-rate 0 \
		--listen "127.0.0.1:$P_EDGE" --push-tcp-listen "127.0.0.1:$P_TCP" --admin "127.0.0.1:$P_ADMIN" --nats-listen "127.0.0.1:$P_NATS" >>"$tmp/serve.log" 2>&1 &
	pids+=($!)
	SERVE_PID=$!
	for _ in $(seq 1 600); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$P_ADMIN/readyz")" = 200 ] && return
		sleep 0.05
	done
	die "serve did not get ready"
}
serve
jw() { "$tmp/jetway" "$@" --nats "$NATS"; }
echo '{"name":"bench","publish":["bench-writer"],"subscribe":["bench-reader"],"retention":{"max_age":"10m"}}' | jw topic put - >&2
key() { jw app create "$1" --api 'none.*' | sed -n 's/.*(shown once, store it now): \(jw_[^ ]*\).*/\1/p'; }
READER=$(key bench-reader)
WRITER=$(key bench-writer)
[ -n "$READER" ] && [ -n "$WRITER" ] || die "no app keys"
sleep 1 # the edge applies the topic and the apps
pb() { taskset -c 1 "$tmp/pushbench" "$1" --edge "$EDGE" --tcp "127.0.0.1:$P_TCP" --key "$READER" --pubkey "$WRITER" --topic bench --nats "$NATS" --pid "$SERVE_PID" "${@:2}"; }

log "idle connections: $CONNS"
pb conns --n "$CONNS"
sleep 2
log "broadcast: $SUBS subscribers, $MSGS messages of 100 bytes, as fast as they go, then 10 a second"
pb broadcast --subs "$SUBS" --msgs "$MSGS"
sleep 2
pb broadcast --subs "$SUBS" --msgs "$MSGS" --rate 10
sleep 2
log "the same at 10 a second with one more subscriber that never reads"
pb broadcast --subs "$SUBS" --msgs "$MSGS" --rate 10 --slow 1
sleep 2
log "below saturation: 5 a second, without and with one subscriber that never reads (the 1.2x figure)"
pb broadcast --subs "$SUBS" --msgs 100 --rate 5
sleep 2
pb broadcast --subs "$SUBS" --msgs 100 --rate 5 --slow 1
sleep 2
log "over raw TCP: the broadcast at 10 a second"
pb broadcast --subs "$SUBS" --msgs "$MSGS" --rate 10 --transport tcp
sleep 2
sleep 5 # the broadcasts' 10,000 connections are gone
log "unique messages: HTTP publish → one of 100 devices, one message a request, as fast as 64 publishers go"
pb unique --devices 100 --for 10s
log "unique messages in batches of 100 a request: at $RATE/s, then as fast as they go"
pb unique --devices 100 --for 10s --batch 100 --rate "$RATE"
pb unique --devices 100 --for 10s --batch 100
log "resume after 100 missed messages"
pb resume --missed 100 --rounds 50
# A fresh process: the memory the WebSocket rows took is not given back
# to the system at once, and would hide what TCP connections take.
log "over raw TCP: idle connections, on a fresh jetway serve"
kill "$SERVE_PID"
wait "$SERVE_PID" 2>/dev/null || true
serve
pb conns --n "$CONNS" --transport tcp
