#!/usr/bin/env bash
# bench/run.sh — Jetway side by side with its peers, one run, one load tool.
#
# Targets (all on 127.0.0.1, distinct free ports, the same backend behind each):
#   direct    bench/cmd/backend itself (GET /hello, ~60-byte JSON)
#   jetway    `jetway serve` (edge -> embedded NATS -> worker -> backend), API
#             published with `jetway api put`, with --log-level warn (no access log)
#   jetway-log  the same with the default logging: the access log on, one
#             line per call to stderr (here a file)
#   jetway-log-base  (only with BASE=<git rev>) jetway-log built from BASE,
#             for a before/after of a change in the same run
#   jetway-auth  jetway-log's node, another API on the same backend: key
#             auth (X-Api-Key) and a per-app rate limit that never refuses
#   jetway-grpc  jetway-log's node, GET /hello-grpc: the backend's gRPC test
#             service (bench/cmd/backend --grpc), UnaryCall by reflection
#   jetway-channels  jetway-log's node, GET /hello-channels: the same backend
#             as three channels of a channel set (docs/channels.md): the cost
#             of picking a channel and counting its outcome
#   jetway-tls  `jetway serve` with the default logging and --tls-cert: the
#             same calls over TLS (HTTP/1.1 keep-alive, wrk); afterwards
#             bench/cmd/tlsbench makes new full handshakes against it for 5 s
#   jetway-split  a split deployment with the default logging: a separate
#             nats-server (JetStream on), `jetway edge` and `jetway worker`
#             processes
#   revproxy  bench/cmd/revproxy: httputil.ReverseProxy, tuned transport and
#             pooled buffers
#   nginx     nginx as a reverse proxy with a keepalive upstream pool
#
# Idle connections: after the rounds, bench/cmd/idleconns holds IDLE_CONNS
# (5000) idle keep-alive connections on the backend (a bare net/http
# server) and on jetway-log's edge, and reports RSS and live memory (heap
# plus stacks after a forced GC) per connection for each.
#
# Load: wrk. Throughput run: -t2 -c64 -d10s (after a 2s warm-up of the same
# shape); latency run: -t1 -c1 -d5s, from which "added p50" over direct is
# taken. Targets are run one after the other, and the whole sequence twice
# (ROUNDS=2); each figure is the better of the two rounds, which filters out
# a noisy neighbour on a shared VM without hiding a real difference. The
# table also gives each target's own CPU time per request (from
# /proc/PID/stat), which is less noisy than req/s on a loaded 2-core box.
#
# Fairness choices (2-core machine):
#   * No CPU pinning. wrk, the proxy under test and the backend share both
#     cores, as they would on a small VM. Pinning the load generator to one
#     core would leave a single core for a three-part stack (proxy, NATS,
#     worker) and measure scheduling more than the proxies.
#   * Go processes run with the default GOMAXPROCS (= 2 cores).
#   * nginx runs worker_processes 2 (one per core, what "auto" gives here),
#     worker_connections 4096, access_log off, upstream keepalive 256,
#     HTTP/1.1 to the upstream.
#   * Only one target is under load at a time; idle targets cost nothing.
#
# Needs: go, wrk, nginx, curl. When run as root it installs wrk and
# nginx-light with apt-get if they are missing. Takes about 2.5 minutes.
#
# Env overrides: THREADS CONNS DURATION WARMUP LAT_DURATION ROUNDS IDLE_CONNS KEEP_TMP=1
# BASE=<git rev> (adds jetway-log-base)
set -euo pipefail

THREADS=${THREADS:-2}
CONNS=${CONNS:-64}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
LAT_DURATION=${LAT_DURATION:-5s}
ROUNDS=${ROUNDS:-2}
IDLE_CONNS=${IDLE_CONNS:-5000}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

log() { printf '>> %s\n' "$*" >&2; }
die() { printf 'run.sh: %s\n' "$*" >&2; exit 1; }

# --- tools -----------------------------------------------------------------
need_install=()
command -v wrk >/dev/null 2>&1 || need_install+=(wrk)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need_install+=(nginx-light)
if [ ${#need_install[@]} -gt 0 ]; then
	if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
		log "installing ${need_install[*]}"
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_install[@]}" >/dev/null
	else
		die "missing ${need_install[*]}: install them (apt-get install wrk nginx-light) or run as root"
	fi
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
command -v curl >/dev/null || die "curl is needed"
command -v go >/dev/null || die "go is needed"

# --- cleanup ---------------------------------------------------------------
tmp=$(mktemp -d /tmp/jetway-bench.XXXXXX)
chmod 755 "$tmp"
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [ "${KEEP_TMP:-0}" = 1 ]; then log "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- ports -----------------------------------------------------------------
taken_ports=" "
# free_port VAR: sets VAR to a free port no other VAR got. Not called in
# $(...): a subshell would forget taken_ports, and two targets could get
# the same port.
free_port() {
	local p
	for _ in $(seq 1 200); do
		p=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768+)
		case "$taken_ports" in *" $p "*) continue ;; esac
		if [ -z "$(ss -Hltn "sport = :$p" 2>/dev/null)" ]; then
			taken_ports+="$p "
			printf -v "$1" '%s' "$p"
			return
		fi
	done
	die "no free port found"
}
free_port P_BACKEND
free_port P_GRPC
free_port P_JETWAY
free_port P_ADMIN
free_port P_NATS
free_port P_JETWAY_LOG
free_port P_ADMIN_LOG
free_port P_NATS_LOG
free_port P_JETWAY_BASE
free_port P_ADMIN_BASE
free_port P_NATS_BASE
free_port P_SPLIT_NATS
free_port P_SPLIT_EDGE
free_port P_SPLIT_EDGE_ADMIN
free_port P_SPLIT_WORKER_ADMIN
free_port P_TLS
free_port P_TLS_ADMIN
free_port P_TLS_NATS
free_port P_REVPROXY
free_port P_NGINX

wait_http() { # url name logfile
	local i
	for i in $(seq 1 600); do
		if [ "$(curl -sk -o /dev/null -w '%{http_code}' "$1" 2>/dev/null)" = 200 ]; then return 0; fi
		sleep 0.05
	done
	[ -n "${3:-}" ] && tail -20 "$3" >&2
	die "$2 did not answer 200 at $1 within 30s"
}

# --- build -----------------------------------------------------------------
log "building jetway, backend, revproxy, idleconns, nats-server"
(cd "$repo" && go build -o "$tmp/jetway" ./cmd/jetway &&
	go build -o "$tmp/backend" ./bench/cmd/backend &&
	go build -o "$tmp/revproxy" ./bench/cmd/revproxy &&
	go build -o "$tmp/idleconns" ./bench/cmd/idleconns &&
	go build -o "$tmp/tlsbench" ./bench/cmd/tlsbench &&
	go build -o "$tmp/nats-server" github.com/nats-io/nats-server/v2)
if [ -n "${BASE:-}" ]; then
	log "building jetway at $BASE"
	mkdir -p "$tmp/base"
	git -C "$repo" archive "$BASE" | tar -x -C "$tmp/base"
	(cd "$tmp/base" && go build -o "$tmp/jetway-base" ./cmd/jetway)
fi

# --- start -----------------------------------------------------------------
"$tmp/backend" --listen "127.0.0.1:$P_BACKEND" --grpc "127.0.0.1:$P_GRPC" --pprof >"$tmp/backend.log" 2>&1 &
pids+=($!)
BACKEND_PID=$!
wait_http "http://127.0.0.1:$P_BACKEND/hello" backend "$tmp/backend.log"

cat >"$tmp/hello.json" <<EOF
{"name":"bench.hello","pool":"bench","description":"bench/run.sh: GET /hello on the bench backend",
 "route":{"method":"GET","path":"/hello"},
 "backend":{"type":"http","url":"http://127.0.0.1:$P_BACKEND/hello"},
 "timeout":"5s","concurrency":4096}
EOF
# start_jetway NAME BINARY PORT ADMIN NATS [FLAGS...]: serve with the API
# published; sets STARTED_PID.
start_jetway() {
	local name=$1 bin=$2 port=$3 admin=$4 nats=$5
	shift 5
	"$bin" serve --data "$tmp/$name-data" \
		--nats-listen "127.0.0.1:$nats" --listen "127.0.0.1:$port" \
		--admin "127.0.0.1:$admin" "$@" >"$tmp/$name.log" 2>&1 &
	pids+=($!)
	STARTED_PID=$!
	wait_http "http://127.0.0.1:$admin/readyz" "$name (admin /readyz)" "$tmp/$name.log"
	"$bin" api put "$tmp/hello.json" --nats "nats://127.0.0.1:$nats" >&2
	wait_http "${SCHEME:-http}://127.0.0.1:$port/hello" "$name" "$tmp/$name.log"
}
start_jetway jetway "$tmp/jetway" "$P_JETWAY" "$P_ADMIN" "$P_NATS" --log-level warn
JETWAY_PID=$STARTED_PID
start_jetway jetway-log "$tmp/jetway" "$P_JETWAY_LOG" "$P_ADMIN_LOG" "$P_NATS_LOG" --pprof
JETWAY_LOG_PID=$STARTED_PID
# jetway-auth: the same node, an API with key auth and a rate limit whose
# limit is never reached, called with an app's key.
cat >"$tmp/hello-auth.json" <<EOF
{"name":"bench.hello.auth","pool":"bench","description":"bench/run.sh: GET /hello with key auth and a rate limit",
 "route":{"method":"GET","path":"/hello-auth"},
 "backend":{"type":"http","url":"http://127.0.0.1:$P_BACKEND/hello"},
 "auth":{"methods":["key"]},
 "rate_limits":[{"name":"per-app","key":["app"],"limit":1000000000,"window":"1s"}],
 "timeout":"5s","concurrency":4096}
EOF
"$tmp/jetway" api put "$tmp/hello-auth.json" --nats "nats://127.0.0.1:$P_NATS_LOG" >&2
API_KEY=$("$tmp/jetway" app create bench --api 'bench.*' --nats "nats://127.0.0.1:$P_NATS_LOG" | sed -n 's/^API key (shown once, store it now): //p')
[ -n "$API_KEY" ] || die "jetway app create printed no key"
for _ in $(seq 1 200); do
	[ "$(curl -s -o /dev/null -w '%{http_code}' -H "X-Api-Key: $API_KEY" "http://127.0.0.1:$P_JETWAY_LOG/hello-auth")" = 200 ] && break
	sleep 0.05
done
# jetway-grpc: the same node, GET /hello-grpc on the backend's gRPC test
# service (UnaryCall, schema by reflection): the gRPC counterpart of /hello.
cat >"$tmp/hello-grpc.json" <<EOF
{"name":"bench.hello.grpc","pool":"bench","description":"bench/run.sh: GET /hello-grpc, a gRPC unary call",
 "route":{"method":"GET","path":"/hello-grpc"},
 "backend":{"type":"grpc","target":"127.0.0.1:$P_GRPC","method":"grpc.testing.TestService/UnaryCall"},
 "timeout":"5s","concurrency":4096}
EOF
"$tmp/jetway" api put "$tmp/hello-grpc.json" --nats "nats://127.0.0.1:$P_NATS_LOG" >&2
wait_http "http://127.0.0.1:$P_JETWAY_LOG/hello-grpc" jetway-grpc "$tmp/jetway-log.log"
# jetway-channels: the same node, GET /hello-channels: /hello's backend as
# three channels of one set.
cat >"$tmp/hello-channels.json" <<EOF
{"name":"bench.hello.channels","pool":"bench","description":"bench/run.sh: GET /hello as a channel set of three",
 "route":{"method":"GET","path":"/hello-channels"},
 "channels":[{"name":"a","backend":{"type":"http","url":"http://127.0.0.1:$P_BACKEND/hello"}},
             {"name":"b","backend":{"type":"http","url":"http://127.0.0.1:$P_BACKEND/hello"}},
             {"name":"c","backend":{"type":"http","url":"http://127.0.0.1:$P_BACKEND/hello"}}],
 "timeout":"5s","concurrency":4096}
EOF
"$tmp/jetway" api put "$tmp/hello-channels.json" --nats "nats://127.0.0.1:$P_NATS_LOG" >&2
wait_http "http://127.0.0.1:$P_JETWAY_LOG/hello-channels" jetway-channels "$tmp/jetway-log.log"
if [ -n "${BASE:-}" ]; then
	start_jetway jetway-log-base "$tmp/jetway-base" "$P_JETWAY_BASE" "$P_ADMIN_BASE" "$P_NATS_BASE"
	JETWAY_BASE_PID=$STARTED_PID
fi

mkdir -p "$tmp/tls"
"$tmp/tlsbench" certs "$tmp/tls"
SCHEME=https start_jetway jetway-tls "$tmp/jetway" "$P_TLS" "$P_TLS_ADMIN" "$P_TLS_NATS" \
	--tls-cert "$tmp/tls/cert.pem" --tls-key "$tmp/tls/key.pem"
JETWAY_TLS_PID=$STARTED_PID

# The split deployment: its own nats-server, one edge, one worker.
"$tmp/nats-server" -a 127.0.0.1 -p "$P_SPLIT_NATS" -js -sd "$tmp/split-nats" >"$tmp/split-nats.log" 2>&1 &
pids+=($!)
SPLIT_NATS_PID=$!
for _ in $(seq 1 200); do
	grep -q "Server is ready" "$tmp/split-nats.log" && break
	sleep 0.05
done
"$tmp/jetway" edge --nats "nats://127.0.0.1:$P_SPLIT_NATS" --data "$tmp/split-edge" \
	--listen "127.0.0.1:$P_SPLIT_EDGE" --admin "127.0.0.1:$P_SPLIT_EDGE_ADMIN" >"$tmp/split-edge.log" 2>&1 &
pids+=($!)
SPLIT_EDGE_PID=$!
"$tmp/jetway" worker --nats "nats://127.0.0.1:$P_SPLIT_NATS" --data "$tmp/split-worker" \
	--pool bench --admin "127.0.0.1:$P_SPLIT_WORKER_ADMIN" >"$tmp/split-worker.log" 2>&1 &
pids+=($!)
SPLIT_WORKER_PID=$!
wait_http "http://127.0.0.1:$P_SPLIT_EDGE_ADMIN/readyz" "jetway-split edge (admin /readyz)" "$tmp/split-edge.log"
wait_http "http://127.0.0.1:$P_SPLIT_WORKER_ADMIN/readyz" "jetway-split worker (admin /readyz)" "$tmp/split-worker.log"
"$tmp/jetway" api put "$tmp/hello.json" --nats "nats://127.0.0.1:$P_SPLIT_NATS" >&2
wait_http "http://127.0.0.1:$P_SPLIT_EDGE/hello" jetway-split "$tmp/split-edge.log"

"$tmp/revproxy" --listen "127.0.0.1:$P_REVPROXY" --target "http://127.0.0.1:$P_BACKEND" >"$tmp/revproxy.log" 2>&1 &
pids+=($!)
REVPROXY_PID=$!
wait_http "http://127.0.0.1:$P_REVPROXY/hello" revproxy "$tmp/revproxy.log"

mkdir -p "$tmp/nginx/logs" "$tmp/nginx/tmp"
cat >"$tmp/nginx/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 2;
pid $tmp/nginx/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $tmp/nginx/tmp/body;
    proxy_temp_path $tmp/nginx/tmp/proxy;
    fastcgi_temp_path $tmp/nginx/tmp/fastcgi;
    uwsgi_temp_path $tmp/nginx/tmp/uwsgi;
    scgi_temp_path $tmp/nginx/tmp/scgi;
    keepalive_requests 1000000;
    upstream backend {
        server 127.0.0.1:$P_BACKEND;
        keepalive 256;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$P_NGINX;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
            proxy_set_header X-Forwarded-For \$remote_addr;
        }
    }
}
EOF
"$NGINX" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" -e stderr >"$tmp/nginx.log" 2>&1 &
pids+=($!)
NGINX_PID=$!
wait_http "http://127.0.0.1:$P_NGINX/hello" nginx "$tmp/nginx.log"

# --- measure ---------------------------------------------------------------
# to_us converts a wrk latency ("512.00us", "1.23ms", "1.00s") to µs.
to_us() {
	awk -v v="$1" 'BEGIN {
		n = v + 0
		if (v ~ /us$/) m = 1; else if (v ~ /ms$/) m = 1000; else if (v ~ /s$/) m = 1000000; else m = 1
		printf "%.0f", n * m }'
}
# run_wrk NAME URL THREADS CONNS DURATION -> sets RPS P50 P99 (µs); the
# target's header (hdr[NAME]), if any, goes with every request.
run_wrk() {
	local out="$tmp/wrk-$1-c$4.txt"
	wrk -t"$3" -c"$4" -d"$5" --latency ${hdr[$1]:+-H "${hdr[$1]}"} "$2" >"$out" 2>&1
	RPS=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$out")
	P50=$(to_us "$(awk '$1 == "50%" {print $2}' "$out")")
	P99=$(to_us "$(awk '$1 == "99%" {print $2}' "$out")")
	if grep -q 'Non-2xx\|Socket errors' "$out"; then
		log "warning: $1 had errors:"
		grep 'Non-2xx\|Socket errors' "$out" >&2
	fi
}

# cpu_ticks PID... -> utime+stime of the processes, in clock ticks.
cpu_ticks() {
	local p sum=0 t
	for p in "$@"; do
		t=$(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13}') || t=0
		sum=$((sum + ${t:-0}))
	done
	echo "$sum"
}
HZ=$(getconf CLK_TCK)
nginx_pids() { echo "$NGINX_PID" $(ps -o pid= --ppid "$NGINX_PID"); }

declare -A rps p50 p99 cpu lat50 lat99
declare -A hdr=([jetway-auth]="X-Api-Key: $API_KEY")
targets=(direct jetway jetway-log jetway-auth jetway-grpc jetway-channels jetway-tls jetway-split revproxy nginx)
[ -n "${BASE:-}" ] && targets=(direct jetway jetway-log jetway-log-base jetway-auth jetway-grpc jetway-channels jetway-tls jetway-split revproxy nginx)
# ONLY="jetway-log jetway-channels" runs those targets alone (a quick A/B).
[ -n "${ONLY:-}" ] && read -r -a targets <<<"$ONLY"
declare -A url=(
	[direct]="http://127.0.0.1:$P_BACKEND/hello"
	[jetway]="http://127.0.0.1:$P_JETWAY/hello"
	[jetway-log]="http://127.0.0.1:$P_JETWAY_LOG/hello"
	[jetway-log-base]="http://127.0.0.1:$P_JETWAY_BASE/hello"
	[jetway-split]="http://127.0.0.1:$P_SPLIT_EDGE/hello"
	[jetway-auth]="http://127.0.0.1:$P_JETWAY_LOG/hello-auth"
	[jetway-grpc]="http://127.0.0.1:$P_JETWAY_LOG/hello-grpc"
	[jetway-channels]="http://127.0.0.1:$P_JETWAY_LOG/hello-channels"
	[jetway-tls]="https://127.0.0.1:$P_TLS/hello"
	[revproxy]="http://127.0.0.1:$P_REVPROXY/hello"
	[nginx]="http://127.0.0.1:$P_NGINX/hello"
)
declare -A procs=(
	[direct]="$BACKEND_PID"
	[jetway]="$JETWAY_PID"
	[jetway-log]="$JETWAY_LOG_PID"
	[jetway-log-base]="${JETWAY_BASE_PID:-}"
	[jetway-split]="$SPLIT_EDGE_PID $SPLIT_WORKER_PID $SPLIT_NATS_PID"
	[jetway-auth]="$JETWAY_LOG_PID"
	[jetway-grpc]="$JETWAY_LOG_PID"
	[jetway-channels]="$JETWAY_LOG_PID"
	[jetway-tls]="$JETWAY_TLS_PID"
	[revproxy]="$REVPROXY_PID"
	[nginx]="$(nginx_pids)"
)
for round in $(seq 1 "$ROUNDS"); do
	for t in "${targets[@]}"; do
		log "round $round/$ROUNDS $t: warm-up $WARMUP, throughput -t$THREADS -c$CONNS -d$DURATION, latency -t1 -c1 -d$LAT_DURATION"
		wrk -t"$THREADS" -c"$CONNS" -d"$WARMUP" ${hdr[$t]:+-H "${hdr[$t]}"} "${url[$t]}" >/dev/null 2>&1
		# shellcheck disable=SC2086 # procs holds several pids for nginx
		c0=$(cpu_ticks ${procs[$t]})
		run_wrk "$t" "${url[$t]}" "$THREADS" "$CONNS" "$DURATION"
		# shellcheck disable=SC2086
		c1=$(cpu_ticks ${procs[$t]})
		reqs=$(awk '/requests in/ {print $1}' "$tmp/wrk-$t-c$CONNS.txt")
		if [ -z "${rps[$t]:-}" ] || [ "$RPS" -gt "${rps[$t]}" ]; then
			rps[$t]=$RPS p50[$t]=$P50 p99[$t]=$P99
			cpu[$t]=$(awk -v c=$((c1 - c0)) -v hz="$HZ" -v n="$reqs" 'BEGIN {printf "%.0f", c / hz * 1e6 / n}')
		fi
		run_wrk "$t" "${url[$t]}" 1 1 "$LAT_DURATION"
		if [ -z "${lat50[$t]:-}" ] || [ "$P50" -lt "${lat50[$t]}" ]; then
			lat50[$t]=$P50 lat99[$t]=$P99
		fi
	done
done

# --- report ----------------------------------------------------------------
echo
echo "jetway bench: $(nproc) cores, $(go version | awk '{print $3}'), $(wrk -v 2>&1 | head -1 | awk '{print $1, $2}'), $("$NGINX" -v 2>&1 | sed 's/.*: //')"
echo "throughput: wrk -t$THREADS -c$CONNS -d$DURATION; latency: wrk -t1 -c1 -d$LAT_DURATION; GET /hello"
echo
printf '%-16s %10s %9s %9s %12s  %11s %11s\n' target 'req/s' 'p50(us)' 'p99(us)' 'cpu(us/req)' 'c1 p50(us)' 'c1 p99(us)'
for t in "${targets[@]}"; do
	printf '%-16s %10s %9s %9s %12s  %11s %11s\n' "$t" "${rps[$t]}" "${p50[$t]}" "${p99[$t]}" "${cpu[$t]}" "${lat50[$t]}" "${lat99[$t]}"
done
echo "cpu = CPU time of the target's own processes per request during the throughput run"
echo "(direct: the backend; jetway: the serve process incl. embedded NATS; jetway-split: edge,"
echo "worker and nats-server; nginx: master+workers)."
echo "Best of $ROUNDS rounds: highest req/s for the throughput columns, lowest c1 p50 for the latency ones."
echo
if [ -n "${ONLY:-}" ]; then
	# A quick A/B of the targets asked for: the channel set's ratio if both
	# of its targets ran, and no TLS or idle-connection runs.
	if [ -n "${rps[jetway-log]:-}" ] && [ -n "${rps[jetway-channels]:-}" ]; then
		awk -v l="${rps[jetway-log]}" -v ch="${rps[jetway-channels]}" -v cl="${cpu[jetway-log]}" -v cch="${cpu[jetway-channels]}" 'BEGIN {
		printf "req/s ratio jetway-channels/jetway-log: %.2f\n", ch / l
		printf "cpu ratio jetway-channels/jetway-log:   %.2f\n", cch / cl }'
	fi
	exit 0
fi
awk -v j="${rps[jetway]}" -v l="${rps[jetway-log]}" -v s="${rps[jetway-split]}" -v r="${rps[revproxy]}" -v n="${rps[nginx]}" \
	-v cl="${cpu[jetway-log]}" -v cr="${cpu[revproxy]}" -v a="${rps[jetway-auth]}" -v tl="${rps[jetway-tls]}" \
	-v g="${rps[jetway-grpc]}" -v cg="${cpu[jetway-grpc]}" -v ch="${rps[jetway-channels]}" -v cch="${cpu[jetway-channels]}" 'BEGIN {
	printf "req/s ratio jetway/revproxy:       %.2f\n", j / r
	printf "req/s ratio jetway/nginx:          %.2f\n", j / n
	printf "req/s ratio jetway-log/revproxy:   %.2f\n", l / r
	printf "req/s ratio jetway-log/nginx:      %.2f\n", l / n
	printf "req/s ratio jetway-split/revproxy: %.2f\n", s / r
	printf "cpu ratio jetway-log/revproxy:     %.2f\n", cl / cr
	printf "req/s ratio jetway-auth/jetway-log: %.2f\n", a / l
	printf "req/s ratio jetway-tls/jetway-log:  %.2f\n", tl / l
	printf "req/s ratio jetway-grpc/jetway-log: %.2f\n", g / l
	printf "cpu ratio jetway-grpc/jetway-log:   %.2f\n", cg / cl
	printf "req/s ratio jetway-channels/jetway-log: %.2f\n", ch / l
	printf "cpu ratio jetway-channels/jetway-log:   %.2f\n", cch / cl }'
for t in jetway jetway-log jetway-split revproxy nginx; do
	printf 'added p50 latency over direct at c1, %-10s: %d us\n' "$t" $((lat50[$t] - lat50[direct]))
done
if ! kill -0 "$JETWAY_PID" 2>/dev/null; then die "jetway exited during the run (see $tmp/jetway.log)"; fi
if ! kill -0 "$JETWAY_LOG_PID" 2>/dev/null; then die "jetway-log exited during the run (see $tmp/jetway-log.log)"; fi
if ! kill -0 "$SPLIT_EDGE_PID" 2>/dev/null || ! kill -0 "$SPLIT_WORKER_PID" 2>/dev/null; then die "jetway-split exited during the run (see $tmp/split-*.log)"; fi

# --- TLS handshakes --------------------------------------------------------
c0=$(cpu_ticks "$JETWAY_TLS_PID")
hs=$("$tmp/tlsbench" handshakes --addr "127.0.0.1:$P_TLS" --duration 5s --conns 8) || die "tlsbench handshakes failed"
c1=$(cpu_ticks "$JETWAY_TLS_PID")
n_hs=$(echo "$hs" | sed 's/^handshakes=\([0-9]*\).*/\1/')
echo
awk -v n="$n_hs" -v c=$((c1 - c0)) -v hz="$HZ" 'BEGIN {
	us = c / hz * 1e6 / n
	printf "new TLS handshakes (ECDSA P-256, no resumption, 8 clients, 5s): %.0f/s; jetway-tls CPU %.0f us each = %.0f per core-second\n", n / 5, us, 1e6 / us }'

# --- idle connections ------------------------------------------------------
echo
echo "idle keep-alive connections: $IDLE_CONNS held, one GET each, then idle 5s"
idle() { # name url pid pprof
	local out
	out=$("$tmp/idleconns" --url "$2" --pid "$3" --pprof "$4" --conns "$IDLE_CONNS" --settle 5s) || die "idleconns on $1 failed"
	IDLE_RSS=$(echo "$out" | sed 's/.* per_conn_bytes=\([0-9-]*\).*/\1/')
	IDLE_LIVE=$(echo "$out" | sed 's/.*live_per_conn_bytes=\([0-9-]*\).*/\1/')
	printf '%-16s rss/conn %6d B   live/conn (heap+stacks after GC) %6d B\n' "$1" "$IDLE_RSS" "$IDLE_LIVE"
}
idle direct "http://127.0.0.1:$P_BACKEND/hello" "$BACKEND_PID" "http://127.0.0.1:$P_BACKEND/debug/pprof/"
bare_rss=$IDLE_RSS bare_live=$IDLE_LIVE
idle jetway-log "http://127.0.0.1:$P_JETWAY_LOG/hello" "$JETWAY_LOG_PID" "http://127.0.0.1:$P_ADMIN_LOG/debug/pprof/"
printf 'the edge over a bare net/http server: rss %+d B/conn, live %+d B/conn\n' $((IDLE_RSS - bare_rss)) $((IDLE_LIVE - bare_live))
