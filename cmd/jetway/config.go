package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/otel"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

// A node's process config is read in full before anything starts: the
// flags, the environment they default from (JETWAY_NATS_URL,
// JETWAY_ADMIN_TOKEN) and the OTEL_* settings of tracing. Every problem is
// collected, so that one try lists them all and a bad flag never shows up
// only after NATS has started, a port was bound or a file was written.

type role string

const (
	roleServe  role = "serve"
	roleEdge   role = "edge"
	roleWorker role = "worker"
	roleAdmin  role = "admin"
)

// hasEdge reports whether the role runs an edge: serve and edge.
func (r role) hasEdge() bool { return r == roleServe || r == roleEdge }

var roleHelp = map[role]string{
	roleServe: `Usage: jetway serve [flags]

Runs everything in one process: an embedded nats-server with JetStream (data
in --data), an edge on --listen, workers for every pool, and the admin
listener. Other jetway processes and the nats CLI can join through
--nats-listen. With --nats URL, an existing NATS is used instead of
embedding one. With --demo, a demo backend starts and demo APIs are
published, so that curl http://127.0.0.1:8080/v1/hello/world works at once.

Flags:
`,
	roleEdge: `Usage: jetway edge --nats URL [flags]

Runs an HTTP edge node: it routes requests from its copy of the registry and
sends each as a NATS request to the API's worker pool. Run any number.

Flags:
`,
	roleAdmin: `Usage: jetway admin --nats URL [--edge URL] [flags]

Runs the admin REST API and the browser console (/v1/, /console/ on
--admin) as the admin NATS user, beside an existing cluster: no edge, no
worker. Its first admin token is --admin-token, or the one in
<data>/admin-token, made at its first start. Saved cases and promote go
through --edge.

Flags:
`,
	roleWorker: `Usage: jetway worker --nats URL --pool NAME [--pool NAME ...] [flags]

Runs a worker for the given pools: it takes the requests of every API of
those pools off NATS (queue group per pool) and calls their backends. Run
more processes of a pool for more capacity.

Flags:
`,
}

// nodeFlags are a node's flags as given (or defaulted).
type nodeFlags struct {
	edgeURL     string // admin: the edge cases run through
	natsURL     string
	natsListen  string
	dataDir     string
	listen      string
	admin       string
	pools       stringList
	demo        bool
	inProcess   bool
	natsAuth    bool
	pprof       bool
	accessLog   bool
	maxInFlight int64
	// push admission (push.Options)
	pushPerApp, pushPerIP, pushConnectRate int
	pushClusterPerApp, pushClusterPerIP    int
	pushTCPListen                          string
	jobAckWait                             time.Duration
	pushCommandsPerSecond                  int

	adminToken        string
	adminTLSCert      string
	adminTLSKey       string
	trustedProxies    stringList
	ipAllow, ipDeny   stringList
	maxConns          int
	readHeaderTimeout time.Duration
	readTimeout       time.Duration
	idleTimeout       time.Duration
	maxHeaderBytes    int
	tlsCert, tlsKey   stringList
	tlsClientCerts    bool
	acmeHosts         stringList
	acmeEmail         string
	changeWebhook     string
	acmeCA            string
	acmeCARoot        string
	h2c               bool
	natsClient        bus.ClientAuth                       // --nats-tls-*, --nats-creds, --nats-nkey
	natsListenTLS     struct{ cert, key, clientCA string } // serve: the embedded server's TLS
	replicas          int
	drain             time.Duration
	// NATS failure detection (bus.ConnectOptions, bus.LinkOptions) and
	// how stale a registry /readyz still calls ready.
	natsPing, natsProbeAfter, natsProbeTimeout time.Duration
	natsPingsOut                               int
	readyMaxStale                              time.Duration
	natsStandby                                string        // edge: a standby cluster's URL(s)
	failoverAfter, failbackAfter               time.Duration // edge with --nats-standby
	logFormat                                  string
	logLevel                                   string
}

// flags defines role r's flags on f. Their names, defaults and help texts
// are a contract with scripts and docs: change none lightly.
func (r role) flags(f *nodeFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("jetway "+string(r), flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, roleHelp[r])
		fs.PrintDefaults()
	}
	natsDefault := envOr("JETWAY_NATS_URL", bus.DefaultURL)
	if r == roleServe {
		natsDefault = os.Getenv("JETWAY_NATS_URL")
		fs.StringVar(&f.natsListen, "nats-listen", "127.0.0.1:4222", "client address of the embedded NATS server (port 0 picks a free one)")
		fs.BoolVar(&f.demo, "demo", false, "start a demo backend and publish demo APIs (demo.*)")
		fs.StringVar(&f.changeWebhook, "change-webhook", "", "POST every registry change (the audit trail's records, in order, at least once) to this http(s) URL")
		fs.BoolVar(&f.natsAuth, "nats-auth", false, "require NATS users on the embedded server: admin (registry writes), edge and worker, with least-privilege permissions; passwords in <data>/nats-credentials.json (other processes join with nats://edge:<password>@host:port)")
		fs.BoolVar(&f.inProcess, "in-process", true, "connect this process's edge, workers and registry to the embedded NATS in memory instead of over TCP (about half the added latency)")
		fs.StringVar(&f.natsURL, "nats", natsDefault, "use this NATS instead of embedding one (env JETWAY_NATS_URL)")
		fs.StringVar(&f.natsListenTLS.cert, "nats-listen-tls-cert", "", "serve the embedded NATS's --nats-listen over TLS only, with this PEM certificate (and --nats-listen-tls-key); this process's own parts connect in memory")
		fs.StringVar(&f.natsListenTLS.key, "nats-listen-tls-key", "", "PEM key of --nats-listen-tls-cert")
		fs.StringVar(&f.natsListenTLS.clientCA, "nats-listen-tls-ca", "", "with --nats-listen-tls-cert: require every NATS client to present a certificate this PEM CA signed (mutual TLS)")
	} else {
		fs.StringVar(&f.natsURL, "nats", natsDefault, "NATS server URL(s), comma-separated (env JETWAY_NATS_URL)")
	}
	natsAuthFlags(fs, &f.natsClient)
	fs.DurationVar(&f.natsPing, "nats-ping-interval", bus.DefaultPingInterval, "ping the NATS server this often; with --nats-max-pings-out, a server that stopped answering is left for another within interval × (max+1)")
	fs.IntVar(&f.natsPingsOut, "nats-max-pings-out", bus.DefaultMaxPingsOut, "unanswered pings after which the NATS server is left for another")
	fs.DurationVar(&f.natsProbeAfter, "nats-probe-after", bus.DefaultQuietForProbe, "with calls in flight and nothing received from NATS for this long, ping the server at once")
	fs.DurationVar(&f.natsProbeTimeout, "nats-probe-timeout", bus.DefaultProbeTimeout, "a server that does not answer that ping within this is suspect: /readyz turns 503 and the connection moves to another server")
	if r == roleEdge {
		fs.StringVar(&f.natsStandby, "nats-standby", "", "a standby NATS cluster's URL(s), with its own workers and a mirror of the registry (jetway standby init): calls move there when the primary (--nats) is unhealthy")
		fs.DurationVar(&f.failoverAfter, "failover-after", 5*time.Second, "with --nats-standby: how long the primary must be unhealthy (unreachable, or without its quorum) before calls move to the standby")
		fs.DurationVar(&f.failbackAfter, "failback-after", 5*time.Minute, "with --nats-standby: how long the primary must be healthy again before calls move back; 0: only when told (POST /site?use=primary on the admin listener)")
	}
	fs.DurationVar(&f.readyMaxStale, "ready-max-stale", 15*time.Minute, "how long /readyz stays 200 on a registry that stopped following NATS (watch broken, quorum lost), saying why; 0: for ever")
	fs.StringVar(&f.dataDir, "data", "./jetway-data", "folder for JetStream data (serve) and the local registry snapshot")
	if r == roleAdmin {
		fs.StringVar(&f.edgeURL, "edge", "", "the edge the admin API sends saved cases and promotes' cases to (http://host:port); empty: none")
	}
	if r.hasEdge() {
		fs.StringVar(&f.listen, "listen", ":8080", "edge HTTP address")
		fs.Int64Var(&f.maxInFlight, "max-inflight", 10000, "requests the edge serves at once across all APIs; past it 503 OVERLOADED (0: no cap)")
		fs.IntVar(&f.maxConns, "max-conns", 20000, "client connections the edge keeps open at once; past it new ones are closed (0: no cap)")
		fs.IntVar(&f.pushPerApp, "push-max-conns-per-app", 0, "push connections one app may hold on this edge; past it 429 with Retry-After (0: no cap)")
		fs.IntVar(&f.pushPerIP, "push-max-conns-per-ip", 0, "push connections one client address may hold on this edge; past it 429 with Retry-After (0: no cap)")
		fs.IntVar(&f.pushClusterPerApp, "push-cluster-max-conns-per-app", 0, "push connections one app may hold on all the edges together, as of their last census (a second old); past it 429 with Retry-After (0: no cap; give every edge the same)")
		fs.IntVar(&f.pushClusterPerIP, "push-cluster-max-conns-per-ip", 0, "push connections one client address may hold on all the edges together, as of their last census; past it 429 with Retry-After (0: no cap; give every edge the same)")
		fs.StringVar(&f.pushTCPListen, "push-tcp-listen", "", "serve push subscriptions over raw TCP (length-prefixed JSON frames; TLS with --tls-cert) at this address; empty: not served")
		fs.IntVar(&f.pushConnectRate, "push-connect-rate", 5000, "new push connections a second this edge takes; past it 503 with Retry-After, so a reconnect storm is paced (0: no cap)")
		fs.IntVar(&f.pushCommandsPerSecond, "push-commands-per-second", 50, "frames a second one push WebSocket or TCP client may send (acks, tokens, pongs, anything), with bursts of twice that, beside one per message it is sent; past it the connection is closed with 1008 (0: the default)")
		fs.DurationVar(&f.readHeaderTimeout, "read-header-timeout", 10*time.Second, "time a client has to send a request's headers (slow clients are cut off)")
		fs.DurationVar(&f.readTimeout, "read-timeout", 60*time.Second, "time a client has to send a whole request, body included")
		fs.DurationVar(&f.idleTimeout, "idle-timeout", 120*time.Second, "how long an idle keep-alive connection is kept")
		fs.IntVar(&f.maxHeaderBytes, "max-header-bytes", 64<<10, "largest request header block accepted (431 past it)")
		fs.Var(&f.trustedProxies, "trusted-proxies", "addresses or CIDRs of proxies in front of the edge whose X-Forwarded-For is believed (the client is the right-most untrusted entry); comma-separated or repeated")
		fs.Var(&f.ipAllow, "ip-allow", "only these client addresses or CIDRs may call any API (403 otherwise); comma-separated or repeated")
		fs.Var(&f.ipDeny, "ip-deny", "client addresses or CIDRs refused for every API (403); comma-separated or repeated")
		fs.Var(&f.tlsCert, "tls-cert", "serve --listen over TLS (HTTP/2 and HTTP/1.1) with this PEM certificate chain; repeat with --tls-key for several, chosen by the client's server name, the first the default; reloaded when the files change")
		fs.Var(&f.tlsKey, "tls-key", "the PEM private key of the --tls-cert at the same place")
		fs.Var(&f.acmeHosts, "acme-host", "obtain and renew a certificate for this host name by ACME (Let's Encrypt unless --acme-ca) at its first TLS handshake, shared by every edge through the registry (jetway_acme); repeat for several; turns TLS on")
		fs.StringVar(&f.acmeEmail, "acme-email", "", "contact address of the ACME account")
		fs.StringVar(&f.acmeCA, "acme-ca", "https://acme-v02.api.letsencrypt.org/directory", "ACME directory URL")
		fs.StringVar(&f.acmeCARoot, "acme-ca-root", "", "PEM CA file to trust the ACME directory's TLS with (a private ACME server)")
		fs.BoolVar(&f.h2c, "h2c", false, "also serve unencrypted HTTP/2 (prior knowledge) on a plain --listen, for clients inside a trusted network")
		fs.BoolVar(&f.tlsClientCerts, "tls-client-certs", false, "ask TLS clients for a certificate (checked per API by the mtls auth method, never at the handshake)")
	}
	fs.StringVar(&f.admin, "admin", "127.0.0.1:8081", "admin listener address (/healthz, /readyz, /metrics, /nodes, ...); empty disables it")
	fs.StringVar(&f.adminTLSCert, "admin-tls-cert", "", "serve the admin listener over TLS only, with this PEM certificate (and --admin-tls-key)")
	fs.StringVar(&f.adminTLSKey, "admin-tls-key", "", "PEM key of --admin-tls-cert")
	fs.StringVar(&f.adminToken, "admin-token", os.Getenv("JETWAY_ADMIN_TOKEN"), "bearer token the admin listener requires (except /healthz and /readyz); required when --admin is not on loopback; 32 printable characters at least, 8 of them different: openssl rand -hex 32 (env JETWAY_ADMIN_TOKEN)")
	if r == roleWorker {
		fs.Var(&f.pools, "pool", "pool to serve; repeat or comma-separate for several (required)")
	}
	if r == roleWorker || r == roleServe {
		fs.DurationVar(&f.jobAckWait, "job-ack-wait", workers.DefaultJobAckWait, "how long an async job taken by a worker that went silent (killed, frozen) waits before another worker of its pool takes it; a running job says it is alive three times as often. The pool's workers should agree: the last to start sets it")
	}
	fs.BoolVar(&f.pprof, "pprof", false, "serve Go's profiler at /debug/pprof/ on the admin listener")
	if r.hasEdge() {
		fs.BoolVar(&f.accessLog, "access-log", true, "log one line per call (at info level: --log-level warn also silences it)")
	}
	fs.IntVar(&f.replicas, "replicas", 1, "replicas of registry buckets this node creates (3 on a NATS cluster)")
	fs.DurationVar(&f.drain, "drain-timeout", 30*time.Second, "on SIGTERM, how long in-flight calls may take to finish")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return fs
}

// nodeConfig is what a serve, edge or worker process runs with: its flags
// and what is built from them before anything starts.
type nodeConfig struct {
	role role
	nodeFlags
	// natsFrom says where a NATS URL came from, for messages: "--nats is
	// given" or "JETWAY_NATS_URL is set".
	natsFrom string

	trusted, allow, deny []netip.Prefix // parsed --trusted-proxies, --ip-allow, --ip-deny
	log                  *slog.Logger
	logOut               io.Writer                // where log writes (stderr), for the access log's own buffered logger
	tracing              *sdktrace.TracerProvider // nil: tracing off
	certs                *edge.Certs              // --tls-cert/--tls-key, loaded; nil: plain HTTP
	adminTLS             *tls.Config              // --admin-tls-cert/--admin-tls-key, loaded; nil: plain HTTP
	natsOpts             []nats.Option            // --nats-tls-*, --nats-creds, --nats-nkey, loaded
	natsServerTLS        *tls.Config              // serve --nats-listen-tls-*; nil: plain
}

// problems is every problem of a node's config; it is a usage error (exit
// 2), printed one problem a line.
type problems []error

func (p problems) Error() string {
	lines := make([]string, len(p))
	for i, err := range p {
		lines[i] = strings.TrimPrefix(err.Error(), "usage: ")
	}
	return strings.Join(lines, "\n")
}

func (p problems) Unwrap() []error      { return p }
func (p problems) Is(target error) bool { return target == errUsage }

// loadNodeConfig parses and checks role r's flags and environment and
// builds the logger and the tracer provider. It starts nothing outside the
// process: with any problem it returns them all (a problems) and leaves
// no goroutine behind; with --help it prints the help and returns
// flag.ErrHelp.
func loadNodeConfig(r role, args []string, stderr io.Writer) (*nodeConfig, error) {
	c := &nodeConfig{role: r}
	fs := r.flags(&c.nodeFlags, stderr)
	probs, complete, err := parseNodeArgs(fs, args, stderr)
	if err != nil {
		return nil, err
	}
	if !complete {
		// The flags after an unknown one were not read: checking the
		// others would report missing ones that may well be given.
		return nil, probs
	}
	c.natsFrom = "JETWAY_NATS_URL is set"
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "nats" {
			c.natsFrom = "--nats is given"
		}
	})
	probs = append(probs, c.validate(stderr)...)

	// Tracing reads the OTEL_* settings; it is built even when flags are
	// bad, so that a wrong setting is listed with the rest.
	log := c.log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tp, err := otel.SetupTracing(context.Background(), "jetway-"+string(r), log)
	if err != nil {
		probs = append(probs, fmt.Errorf("%w: %v", errUsage, err))
	}
	if len(probs) > 0 {
		if tp != nil {
			_ = tp.Shutdown(context.Background())
		}
		return nil, probs
	}
	c.tracing = tp
	return c, nil
}

// parseNodeArgs parses args into fs's flags. Unlike flag.Parse it goes on
// after a bad value: each bad value and each stray argument is a problem of
// its own. It stops at an unknown flag or a malformed one (---x), since
// what follows it may be that flag's value as well as an argument. Parse
// errors are not printed with the usage, as flag.Parse would: the problems
// are listed once, together.
// complete is false when it stopped before the end of args.
func parseNodeArgs(fs *flag.FlagSet, args []string, stderr io.Writer) (probs problems, complete bool, err error) {
	usage := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer func() {
		fs.Usage = usage
		fs.SetOutput(stderr)
	}()
	for len(args) > 0 {
		err := fs.Parse(args)
		rest := fs.Args()
		switch {
		case errors.Is(err, flag.ErrHelp):
			fs.SetOutput(stderr)
			usage()
			return nil, false, err
		case err != nil:
			probs = append(probs, fmt.Errorf("%w: %v", errUsage, err))
			if msg := err.Error(); len(rest) == len(args) ||
				strings.HasPrefix(msg, "flag provided but not defined") || strings.HasPrefix(msg, "bad flag syntax") {
				return probs, false, nil
			}
		case len(rest) > 0:
			if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
				for _, a := range rest { // after "--", everything is an argument
					probs = append(probs, fmt.Errorf("%w: unexpected argument %q", errUsage, a))
				}
				return probs, true, nil
			}
			probs = append(probs, fmt.Errorf("%w: unexpected argument %q", errUsage, rest[0]))
			rest = rest[1:]
		}
		args = rest
	}
	return probs, true, nil
}

// validate checks every flag against the others and the role, and builds
// what is derived from them (the parsed address lists, the logger). It
// reads the --data folder's kind but writes nothing.
func (c *nodeConfig) validate(stderr io.Writer) problems {
	var probs problems
	add := func(err error) {
		if err != nil {
			probs = append(probs, err)
		}
	}
	add(checkAdminToken(c.adminToken))
	if (c.adminTLSCert == "") != (c.adminTLSKey == "") {
		add(fmt.Errorf("%w: --admin-tls-cert and --admin-tls-key go together", errUsage))
	} else if c.adminTLSCert != "" {
		if cert, err := tls.LoadX509KeyPair(c.adminTLSCert, c.adminTLSKey); err != nil {
			add(fmt.Errorf("%w: --admin-tls-cert: %v", errUsage, err))
		} else {
			c.adminTLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		}
	}
	if c.role == roleAdmin && c.admin == "" {
		add(fmt.Errorf("%w: jetway admin serves on --admin: it cannot be empty", errUsage))
	}
	if c.admin != "" {
		if err := checkAddr("--admin", c.admin); err != nil {
			add(err)
		} else {
			add(checkAdminAddr(c.admin, c.adminToken))
		}
	}
	add(c.checkNATSAuth())
	if c.role == roleServe && c.natsURL == "" {
		add(checkNATSListen(c.natsListen))
	}
	if c.role == roleWorker && len(c.pools) == 0 {
		add(fmt.Errorf("%w: jetway worker needs at least one --pool", errUsage))
	}
	for _, p := range c.pools {
		if err := bus.ValidName(p); err != nil {
			add(fmt.Errorf("%w: --pool %q: %v", errUsage, p, err))
		}
	}
	if fi, err := os.Stat(c.dataDir); err == nil && !fi.IsDir() {
		add(fmt.Errorf("%w: --data %q is a file, not a folder", errUsage, c.dataDir))
	}
	if c.edgeURL != "" {
		if u, err := url.Parse(c.edgeURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add(fmt.Errorf("%w: --edge %q: want http://host:port", errUsage, c.edgeURL))
		}
	}
	if c.role.hasEdge() {
		if c.listen != "" {
			add(checkAddr("--listen", c.listen))
		}
		var err error
		if c.trusted, err = registry.ParsePrefixes(c.trustedProxies); err != nil {
			add(fmt.Errorf("%w: --trusted-proxies: %v", errUsage, err))
		}
		if c.allow, err = registry.ParsePrefixes(c.ipAllow); err != nil {
			add(fmt.Errorf("%w: --ip-allow: %v", errUsage, err))
		}
		if c.deny, err = registry.ParsePrefixes(c.ipDeny); err != nil {
			add(fmt.Errorf("%w: --ip-deny: %v", errUsage, err))
		}
	}
	// Negative numbers meant "no cap" or "no timeout" by accident only:
	// the help texts promise 0 for that.
	for _, n := range []struct {
		flag string
		v    int64
	}{
		{"--max-inflight", c.maxInFlight},
		{"--max-conns", int64(c.maxConns)},
		{"--push-max-conns-per-app", int64(c.pushPerApp)},
		{"--push-max-conns-per-ip", int64(c.pushPerIP)},
		{"--push-cluster-max-conns-per-app", int64(c.pushClusterPerApp)},
		{"--push-cluster-max-conns-per-ip", int64(c.pushClusterPerIP)},
		{"--push-connect-rate", int64(c.pushConnectRate)},
		{"--push-commands-per-second", int64(c.pushCommandsPerSecond)},
		{"--max-header-bytes", int64(c.maxHeaderBytes)},
	} {
		if n.v < 0 {
			add(fmt.Errorf("%w: %s %d: must not be negative", errUsage, n.flag, n.v))
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--read-header-timeout", c.readHeaderTimeout},
		{"--read-timeout", c.readTimeout},
		{"--idle-timeout", c.idleTimeout},
		{"--drain-timeout", c.drain},
		{"--ready-max-stale", c.readyMaxStale},
		{"--failback-after", c.failbackAfter},
	} {
		if d.v < 0 {
			add(fmt.Errorf("%w: %s %s: must not be negative", errUsage, d.flag, d.v))
		}
	}
	for _, d := range []struct {
		flag     string
		v        time.Duration
		min, max time.Duration
	}{
		{"--nats-ping-interval", c.natsPing, 100 * time.Millisecond, time.Minute},
		{"--nats-probe-after", c.natsProbeAfter, 50 * time.Millisecond, time.Minute},
		{"--nats-probe-timeout", c.natsProbeTimeout, 20 * time.Millisecond, 10 * time.Second},
	} {
		if d.v < d.min || d.v > d.max {
			add(fmt.Errorf("%w: %s %s: must be between %s and %s", errUsage, d.flag, d.v, d.min, d.max))
		}
	}
	if c.natsStandby != "" && (c.failoverAfter < time.Second || c.failoverAfter > 10*time.Minute) {
		add(fmt.Errorf("%w: --failover-after %s: must be between 1s and 10m", errUsage, c.failoverAfter))
	}
	if c.natsPingsOut < 1 || c.natsPingsOut > 10 {
		add(fmt.Errorf("%w: --nats-max-pings-out %d: must be 1 to 10", errUsage, c.natsPingsOut))
	}
	if (c.role == roleWorker || c.role == roleServe) && (c.jobAckWait < time.Second || c.jobAckWait > 10*time.Minute) {
		add(fmt.Errorf("%w: --job-ack-wait %s: must be between 1s and 10m", errUsage, c.jobAckWait))
	}
	// 0 has always meant 1 (registry.BucketOptions); JetStream keeps at
	// most 5 copies of a stream.
	if c.replicas < 0 || c.replicas > 5 {
		add(fmt.Errorf("%w: --replicas %d: a NATS stream has 1 to 5 replicas", errUsage, c.replicas))
	}
	add(checkLogLevel(c.logLevel))
	add(checkLogFormat(c.logFormat))
	if log, err := newLogger(stderr, c.logFormat, c.logLevel); err == nil {
		c.log = log.With("role", string(c.role))
		c.logOut = stderr
	}
	var err error
	if c.natsOpts, err = c.natsClient.Options(); err != nil {
		add(fmt.Errorf("%w: %v", errUsage, err))
	}
	if t := c.natsListenTLS; t.cert != "" || t.key != "" || t.clientCA != "" {
		switch {
		case c.role != roleServe || c.natsURL != "":
			add(fmt.Errorf("%w: --nats-listen-tls-* are for the embedded NATS of serve, which --nats replaces", errUsage))
		case t.cert == "" || t.key == "":
			add(fmt.Errorf("%w: --nats-listen-tls-cert and --nats-listen-tls-key come together", errUsage))
		case !c.inProcess && (c.natsClient.CA == "" || (t.clientCA != "" && c.natsClient.Cert == "")):
			add(fmt.Errorf("%w: with --in-process=false serve's own parts reach its NATS over TLS: give --nats-tls-ca (and, with --nats-listen-tls-ca, --nats-tls-cert and --nats-tls-key)", errUsage))
		default:
			if c.natsServerTLS, err = bus.ServerTLS(t.cert, t.key, t.clientCA); err != nil {
				add(fmt.Errorf("%w: %v", errUsage, err))
			}
		}
	}
	if c.changeWebhook != "" {
		if err := checkWebhookURL(c.changeWebhook); err != nil {
			add(fmt.Errorf("%w: --change-webhook: %v", errUsage, err))
		}
	}
	for _, h := range c.acmeHosts {
		if err := registry.CheckRouteHost(h); err != nil || strings.HasPrefix(h, "*.") {
			add(fmt.Errorf("%w: --acme-host %q: an exact host name (ACME's tls-alpn-01 cannot get wildcards)", errUsage, h))
		}
	}
	if c.acmeCARoot != "" {
		if _, err := bus.LoadCertPool(c.acmeCARoot); err != nil {
			add(fmt.Errorf("%w: --acme-ca-root: %v", errUsage, err))
		}
	}
	if c.h2c && (len(c.tlsCert) > 0 || len(c.acmeHosts) > 0) {
		add(fmt.Errorf("%w: --h2c is for a plain listener; with --tls-cert or --acme-host HTTP/2 is on already", errUsage))
	}
	if c.tlsClientCerts && len(c.tlsCert) == 0 && len(c.acmeHosts) == 0 {
		add(fmt.Errorf("%w: --tls-client-certs needs TLS (--tls-cert or --acme-host)", errUsage))
	}
	if len(c.tlsCert) != len(c.tlsKey) {
		add(fmt.Errorf("%w: --tls-cert and --tls-key come in pairs: %d certificates, %d keys", errUsage, len(c.tlsCert), len(c.tlsKey)))
	} else if len(c.tlsCert) > 0 || len(c.acmeHosts) > 0 {
		files := make([]edge.CertFile, len(c.tlsCert))
		for i := range files {
			files[i] = edge.CertFile{Cert: c.tlsCert[i], Key: c.tlsKey[i]}
		}
		if c.certs, err = edge.LoadCerts(files, c.log); err != nil {
			add(fmt.Errorf("%w: --tls-cert: %v", errUsage, err))
		}
	}
	return probs
}

// checkNATSAuth refuses serve --nats-auth with a NATS URL: the flag sets up
// the users of the embedded server, and with --nats (or JETWAY_NATS_URL)
// nothing is embedded, so it would silently do nothing while the operator
// believes NATS is locked down.
func (c *nodeConfig) checkNATSAuth() error {
	if !c.natsAuth || c.natsURL == "" {
		return nil
	}
	return fmt.Errorf("%w: --nats-auth sets up the users of the embedded NATS server, but %s, so none is embedded and it would do nothing: "+
		"drop --nats-auth and put the admin user in the URL (nats://admin:<password>@host:port; an external NATS has its own users, see deploy/nats/README.md), "+
		"or drop the URL to embed a server", errUsage, c.natsFrom)
}

// checkAddr checks a listen address's form (host:port, the port a number
// or a service name), as net.Listen would only after NATS has started.
func checkAddr(flagName, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			err = errors.New(ae.Err)
		}
		return fmt.Errorf("%w: %s %q: %v (use host:port, e.g. 127.0.0.1:8080 or :8080)", errUsage, flagName, addr, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%w: %s %q: %q is not a port (0 to 65535)", errUsage, flagName, addr, port)
	}
	return nil
}

// checkNATSListen checks --nats-listen as the embedded server reads it: a
// numeric port.
func checkNATSListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return checkAddr("--nats-listen", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%w: --nats-listen %q: %q is not a port (0 to 65535)", errUsage, addr, port)
	}
	return nil
}

func checkLogLevel(level string) error {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("%w: --log-level %q: use debug, info, warn or error", errUsage, level)
	}
	return nil
}

func checkLogFormat(format string) error {
	if format != "text" && format != "json" {
		return fmt.Errorf("%w: --log-format %q: use text or json", errUsage, format)
	}
	return nil
}
