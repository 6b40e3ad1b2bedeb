package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/otel"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

type role string

const (
	roleServe  role = "serve"
	roleEdge   role = "edge"
	roleWorker role = "worker"
)

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
	roleWorker: `Usage: jetway worker --nats URL --pool NAME [--pool NAME ...] [flags]

Runs a worker for the given pools: it takes the requests of every API of
those pools off NATS (queue group per pool) and calls their backends. Run
more processes of a pool for more capacity.

Flags:
`,
}

type nodeFlags struct {
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

	adminToken        string
	trustedProxies    stringList
	ipAllow, ipDeny   stringList
	maxConns          int
	readHeaderTimeout time.Duration
	readTimeout       time.Duration
	idleTimeout       time.Duration
	maxHeaderBytes    int
	replicas          int
	drain             time.Duration
	logFormat         string
	logLevel          string
}

func (r role) flags(stderr io.Writer) (*flag.FlagSet, *nodeFlags) {
	f := &nodeFlags{}
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
		fs.BoolVar(&f.natsAuth, "nats-auth", false, "require NATS users on the embedded server: admin (registry writes), edge and worker, with least-privilege permissions; passwords in <data>/nats-credentials.json (other processes join with nats://edge:<password>@host:port)")
		fs.BoolVar(&f.inProcess, "in-process", true, "connect this process's edge, workers and registry to the embedded NATS in memory instead of over TCP (about half the added latency)")
		fs.StringVar(&f.natsURL, "nats", natsDefault, "use this NATS instead of embedding one (env JETWAY_NATS_URL)")
	} else {
		fs.StringVar(&f.natsURL, "nats", natsDefault, "NATS server URL(s), comma-separated (env JETWAY_NATS_URL)")
	}
	fs.StringVar(&f.dataDir, "data", "./jetway-data", "folder for JetStream data (serve) and the local registry snapshot")
	if r != roleWorker {
		fs.StringVar(&f.listen, "listen", ":8080", "edge HTTP address")
		fs.Int64Var(&f.maxInFlight, "max-inflight", 10000, "requests the edge serves at once across all APIs; past it 503 OVERLOADED (0: no cap)")
		fs.IntVar(&f.maxConns, "max-conns", 20000, "client connections the edge keeps open at once; past it new ones are closed (0: no cap)")
		fs.DurationVar(&f.readHeaderTimeout, "read-header-timeout", 10*time.Second, "time a client has to send a request's headers (slow clients are cut off)")
		fs.DurationVar(&f.readTimeout, "read-timeout", 60*time.Second, "time a client has to send a whole request, body included")
		fs.DurationVar(&f.idleTimeout, "idle-timeout", 120*time.Second, "how long an idle keep-alive connection is kept")
		fs.IntVar(&f.maxHeaderBytes, "max-header-bytes", 64<<10, "largest request header block accepted (431 past it)")
		fs.Var(&f.trustedProxies, "trusted-proxies", "addresses or CIDRs of proxies in front of the edge whose X-Forwarded-For is believed (the client is the right-most untrusted entry); comma-separated or repeated")
		fs.Var(&f.ipAllow, "ip-allow", "only these client addresses or CIDRs may call any API (403 otherwise); comma-separated or repeated")
		fs.Var(&f.ipDeny, "ip-deny", "client addresses or CIDRs refused for every API (403); comma-separated or repeated")
	}
	fs.StringVar(&f.admin, "admin", "127.0.0.1:8081", "admin listener address (/healthz, /readyz, /metrics, /nodes, ...); empty disables it")
	fs.StringVar(&f.adminToken, "admin-token", os.Getenv("JETWAY_ADMIN_TOKEN"), "bearer token the admin listener requires (except /healthz and /readyz); required when --admin is not on loopback; 32 printable characters at least, 8 of them different: openssl rand -hex 32 (env JETWAY_ADMIN_TOKEN)")
	if r == roleWorker {
		fs.Var(&f.pools, "pool", "pool to serve; repeat or comma-separate for several (required)")
	}
	fs.BoolVar(&f.pprof, "pprof", false, "serve Go's profiler at /debug/pprof/ on the admin listener")
	if r != roleWorker {
		fs.BoolVar(&f.accessLog, "access-log", true, "log one line per call (at info level: --log-level warn also silences it)")
	}
	fs.IntVar(&f.replicas, "replicas", 1, "replicas of registry buckets this node creates (3 on a NATS cluster)")
	fs.DurationVar(&f.drain, "drain-timeout", 30*time.Second, "on SIGTERM, how long in-flight calls may take to finish")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return fs, f
}

// cmdNode runs serve, edge or worker until SIGINT/SIGTERM.
func cmdNode(r role, args []string, stderr io.Writer) error {
	fs, f := r.flags(stderr)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, pos[0])
	}
	if err := checkAdminToken(f.adminToken); err != nil {
		return err
	}
	if err := checkAdminAddr(f.admin, f.adminToken); err != nil {
		return err
	}
	if err := checkNATSAuth(fs, f); err != nil {
		return err
	}
	if r == roleWorker && len(f.pools) == 0 {
		return fmt.Errorf("%w: jetway worker needs at least one --pool", errUsage)
	}
	log, err := newLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	log = log.With("role", string(r))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	n := &node{role: r, f: f, log: log, id: nuid.Next()}
	return n.run(ctx)
}

// checkNATSAuth refuses serve --nats-auth with a NATS URL: the flag sets up
// the users of the embedded server, and with --nats (or JETWAY_NATS_URL)
// nothing is embedded, so it would silently do nothing while the operator
// believes NATS is locked down.
func checkNATSAuth(fs *flag.FlagSet, f *nodeFlags) error {
	if !f.natsAuth || f.natsURL == "" {
		return nil
	}
	from := "JETWAY_NATS_URL is set"
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "nats" {
			from = "--nats is given"
		}
	})
	return fmt.Errorf("%w: --nats-auth sets up the users of the embedded NATS server, but %s, so none is embedded and it would do nothing: "+
		"drop --nats-auth and put the admin user in the URL (nats://admin:<password>@host:port; an external NATS has its own users, see deploy/nats/README.md), "+
		"or drop the URL to embed a server", errUsage, from)
}

// node is one running jetway process and what it owns.
type node struct {
	role role
	f    *nodeFlags
	log  *slog.Logger

	conns    []*nats.Conn
	creds    bus.Credentials // serve --nats-auth: the role passwords
	beatDone chan struct{}
	tracing  *sdktrace.TracerProvider // nil: tracing off
	tracker  *bus.Tracker
	id       string
	metrics  *otel.Metrics
	// stopWatch ends the registry watch (at shutdown).
	stopWatch context.CancelFunc
	inproc    nats.InProcessConnProvider // the embedded server, when connecting in memory
	draining  atomic.Bool
	watcher   *registry.Watcher
	edge      *edge.Edge
	worker    *workers.Worker
}

func (n *node) connect(ctx context.Context, url, name, user string) (*nats.Conn, error) {
	var extra []nats.Option
	if n.inproc != nil {
		extra = append(extra, nats.InProcessServer(n.inproc))
	}
	if n.creds != nil { // serve with --nats-auth: each part connects as its role
		extra = append(extra, nats.UserInfo(user, n.creds[user]))
	} else if n.role != roleServe {
		// An edge or a worker process connects as the user in its URL,
		// which is its role's: every connection uses that role's inbox.
		user = string(n.role)
	}
	var pools []string
	if user == bus.UserWorker {
		pools = n.f.pools // its pool set's inbox (bus.InboxPrefix)
	}
	nc, err := bus.Connect(ctx, url, bus.ConnectOptions{Name: name, Wait: true, Logger: n.log, Extra: extra, Role: user, Pools: pools})
	if err != nil {
		return nil, err
	}
	n.conns = append(n.conns, nc)
	return nc, nil
}

func (n *node) run(ctx context.Context) error {
	f := n.f
	defer func() {
		for _, nc := range n.conns {
			nc.Close()
		}
	}()

	natsURL := f.natsURL
	if n.role == roleServe && natsURL == "" {
		cfg := bus.EmbeddedConfig{Listen: f.natsListen, DataDir: f.dataDir}
		if f.natsAuth {
			path := filepath.Join(f.dataDir, "nats-credentials.json")
			creds, err := bus.LoadOrCreateCredentials(path)
			if err != nil {
				return err
			}
			cfg.Credentials, n.creds = creds, creds
			n.log.Info("nats authentication on: users admin, edge and worker; passwords in "+path, "file", path)
		}
		ns, err := bus.StartEmbedded(cfg)
		if err != nil {
			return err
		}
		defer func() {
			ns.Shutdown()
			ns.WaitForShutdown()
		}()
		natsURL = ns.ClientURL()
		if f.inProcess {
			n.inproc = ns
		}
		n.log.Info("embedded nats started", "url", natsURL, "data", filepath.Join(f.dataDir, "nats"))
	}

	tp, err := otel.SetupTracing(ctx, "jetway-"+string(n.role), n.log)
	if err != nil {
		return err
	}
	if tp != nil {
		n.tracing = tp
		n.log.Info("tracing on: exporting spans over OTLP")
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = tp.Shutdown(sctx) // flush what is queued, within 5 s
		}()
	}

	ctl, err := n.connect(ctx, natsURL, "jetway-"+string(n.role)+"-registry", bus.UserAdmin)
	if err != nil {
		return err
	}
	wopts := registry.WatcherOptions{
		Conn:         ctl,
		SnapshotFile: filepath.Join(f.dataDir, "registry-"+string(n.role)+".json"),
		Bucket:       registry.BucketOptions{Replicas: f.replicas},
		Logger:       n.log,
	}
	if n.role == roleWorker {
		// A worker's NATS user reads only what workers need: never the
		// apps and their signing secrets.
		wopts.Buckets = []string{registry.BucketAPIs, registry.BucketFlags}
	}
	n.watcher = registry.NewWatcher(wopts)

	if n.role != roleWorker {
		nc, err := n.connect(ctx, natsURL, "jetway-edge", bus.UserEdge)
		if err != nil {
			return err
		}
		n.metrics = otel.NewMetrics(n.id, string(n.role))
		eo := edge.Options{Conn: nc, Logger: n.log, MaxInFlight: f.maxInFlight, Metrics: n.metrics}
		if eo.TrustedProxies, err = registry.ParsePrefixes(f.trustedProxies); err != nil {
			return fmt.Errorf("%w: --trusted-proxies: %v", errUsage, err)
		}
		allow, err := registry.ParsePrefixes(f.ipAllow)
		if err != nil {
			return fmt.Errorf("%w: --ip-allow: %v", errUsage, err)
		}
		deny, err := registry.ParsePrefixes(f.ipDeny)
		if err != nil {
			return fmt.Errorf("%w: --ip-deny: %v", errUsage, err)
		}
		eo.IPRules = &edge.IPRules{Allow: allow, Deny: deny}
		eo.Nonces = registry.NewNonceStore(ctl, registry.BucketOptions{Replicas: f.replicas})
		if n.role == roleServe {
			// serve is the admin node: it creates every bucket up front, as
			// edges and workers on an authenticated NATS may not.
			octx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := registry.NewClient(octx, ctl, registry.BucketOptions{Replicas: f.replicas})
			cancel()
			if err != nil {
				n.log.Warn("creating registry buckets", "err", err)
			}
			// A deleted nonce bucket would leave signed APIs refused on
			// every edge whose user may not create it: re-create it.
			if err := registry.KeepNonces(ctx, ctl, registry.BucketOptions{Replicas: f.replicas}, func(err error) {
				n.log.Warn("re-creating the nonce bucket", "err", err)
			}); err != nil {
				n.log.Warn("watching the nonce bucket", "err", err)
			}
		}
		if n.tracing != nil {
			eo.Tracing = n.tracing
		}
		if f.accessLog {
			eo.AccessLog = n.log.With("log", "access")
		}
		if n.edge, err = edge.New(eo); err != nil {
			return err
		}
		stopMetrics := make(chan struct{})
		defer close(stopMetrics)
		pub := nc // an edge's user may publish only edge metrics: serve's go as the admin
		if n.role == roleServe {
			pub = ctl
		}
		go n.metrics.Run(stopMetrics, func(rs []otel.Record) {
			if b, err := json.Marshal(rs); err == nil {
				_ = pub.Publish(otel.MetricsSubjectPrefix+string(n.role)+"."+n.id, b)
			}
		})
		// jetway metric asks every edge for an API's recent records.
		if _, err := nc.Subscribe(otel.MetricsQuerySubject, func(m *nats.Msg) {
			if b := n.metrics.AnswerQuery(m.Data, time.Now()); b != nil && m.Reply != "" {
				_ = m.Respond(b)
			}
		}); err != nil {
			return fmt.Errorf("answering metric queries: %w", err)
		}
		n.watcher.OnChange(n.edge.Apply)
		go func() { _ = n.edge.Run(ctx) }()
	}
	if n.role != roleEdge {
		nc, err := n.connect(ctx, natsURL, "jetway-worker", bus.UserWorker)
		if err != nil {
			return err
		}
		wo := workers.Options{Conn: nc, Pools: f.pools, Logger: n.log}
		if n.tracing != nil {
			wo.Tracing = n.tracing
		}
		if n.worker, err = workers.New(wo); err != nil {
			return err
		}
		n.watcher.OnChange(n.worker.Apply)
	}
	wctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	n.stopWatch = stopWatch
	go func() { _ = n.watcher.Run(wctx) }()

	// Heartbeats: this node's, and the live set of all nodes for /nodes.
	beater, err := bus.NewHeartbeat(ctl, bus.Heartbeat{ID: n.id, Role: string(n.role), Pools: f.pools, Version: version, Admin: f.admin},
		bus.DefaultHeartbeatPeriod, func() (int64, int) {
			var inflight int64
			if n.worker != nil {
				inflight += n.worker.InFlight()
			}
			if n.edge != nil {
				inflight += n.edge.InFlight()
			}
			return inflight, len(n.watcher.Current().APIs)
		})
	if err != nil {
		return err
	}
	n.beatDone = make(chan struct{})
	go func() { defer close(n.beatDone); _ = beater.Run(ctx) }()
	n.tracker = bus.NewTracker(ctl, bus.DefaultHeartbeatPeriod)
	if err := n.tracker.Start(); err != nil {
		return err
	}
	defer n.tracker.Stop()
	if n.edge != nil {
		go func() {
			if err := n.runAlerts(ctx, ctl); err != nil {
				n.log.Error("alerts not evaluated", "err", err)
			}
		}()
	}

	var edgeSrv, adminSrv *http.Server
	edgeURL := "http://127.0.0.1:8080" // where the edge listens, for the demo's hint
	errc := make(chan error, 2)
	if n.edge != nil {
		edgeSrv = &http.Server{
			Handler:           n.edge,
			ReadHeaderTimeout: f.readHeaderTimeout,
			ReadTimeout:       f.readTimeout,
			IdleTimeout:       f.idleTimeout,
			MaxHeaderBytes:    f.maxHeaderBytes,
			ConnContext:       edge.ConnContext,
			// Every request reaches the edge (Go would answer "OPTIONS *"
			// itself), so its count matches the framing guard's.
			DisableGeneralOptionsHandler: true,
			ErrorLog:                     slog.NewLogLogger(n.log.Handler(), slog.LevelWarn),
		}
		ln, err := net.Listen("tcp", f.listen)
		if err != nil {
			return fmt.Errorf("edge listener: %w", err)
		}
		ln = edge.GuardFraming(edge.LimitListener(ln, f.maxConns), f.maxHeaderBytes)
		n.log.Info("edge listening", "addr", ln.Addr().String())
		edgeURL = "http://" + localAddr(ln.Addr())
		go func() { errc <- edgeSrv.Serve(ln) }()
	}
	if f.admin != "" {
		var h http.Handler = n.adminHandler()
		if f.adminToken != "" {
			h = requireToken(f.adminToken, h)
		}
		adminSrv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		ln, err := net.Listen("tcp", f.admin)
		if err != nil {
			return fmt.Errorf("admin listener: %w", err)
		}
		n.log.Info("admin listening", "addr", ln.Addr().String())
		go func() { errc <- adminSrv.Serve(ln) }()
	}
	if f.demo {
		stopDemo, err := startDemo(ctx, ctl, n.watcher, n.log, edgeURL)
		if err != nil {
			return err
		}
		defer stopDemo()
	}

	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	return n.shutdown(edgeSrv, adminSrv)
}

// shutdown drains in order: the edge stops accepting and lets its calls
// finish, then workers drain their subscriptions and finish theirs, then the
// connections are drained.
func (n *node) shutdown(edgeSrv, adminSrv *http.Server) error {
	n.draining.Store(true)
	n.log.Info("shutting down", "drain_timeout", n.f.drain)
	ctx, cancel := context.WithTimeout(context.Background(), n.f.drain)
	defer cancel()
	var errs []error
	if edgeSrv != nil {
		if err := edgeSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("draining edge: %w", err))
		}
	}
	if n.worker != nil {
		if err := n.worker.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	select { // the last, "stopping" beat goes out before the connections close
	case <-n.beatDone:
	case <-ctx.Done():
	}
	// The registry watch ends before its connection does, so that it does
	// not take the drain for an outage.
	if n.stopWatch != nil {
		n.stopWatch()
	}
	// Drain returns at once and finishes in the background: wait for it,
	// or the embedded server stops under connections still draining.
	for _, nc := range n.conns {
		_ = nc.Drain()
	}
	for _, nc := range n.conns {
		for !nc.IsClosed() && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if adminSrv != nil {
		_ = adminSrv.Close()
	}
	n.log.Info("stopped")
	return errors.Join(errs...)
}

// localAddr is a listener's address as a local client dials it: an
// unspecified host (":8080", "[::]:8080") becomes 127.0.0.1.
func localAddr(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return a.String()
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(tcp.Port))
}
