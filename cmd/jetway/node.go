package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"

	"github.com/jetway-gw/jetway/admin"
	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/otel"
	"github.com/jetway-gw/jetway/push"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

// cmdNode runs serve, edge or worker until SIGINT/SIGTERM. Its config is
// read and checked in full first: with a problem nothing starts.
func cmdNode(r role, args []string, stderr io.Writer) error {
	cfg, err := loadNodeConfig(r, args, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	n := &node{role: r, cfg: cfg, log: cfg.log, id: nuid.Next(), errc: make(chan error, 4), wire: bus.NewWireVersions()}
	return n.run(ctx)
}

// node is one running jetway process and what it owns.
type node struct {
	role role
	cfg  *nodeConfig
	log  *slog.Logger

	natsURL  string           // where this process's parts connect
	ctl      *nats.Conn       // the registry's connection (serve: as the admin user)
	registry *registry.Client // serve: the admin API's registry client
	conns    []*nats.Conn
	// links are what the call path knows of the edge's and the worker's
	// connections (bus.Link): /readyz turns 503 when one is not up.
	links    []namedLink
	failover *failover       // an edge with --nats-standby
	creds    bus.Credentials // serve --nats-auth: the role passwords
	beatDone chan struct{}
	tracker  *bus.Tracker
	wire     *bus.WireVersions // the wire version this node's requests are written in
	id       string
	metrics  *otel.Metrics
	sla      *otel.SLARecorder // the edge's per-minute SLA records (publishMetrics)
	// stopWatch ends the registry watch (at shutdown) and waits until it
	// has, at most until ctx ends.
	stopWatch func(ctx context.Context)
	inproc    nats.InProcessConnProvider // the embedded server, when connecting in memory
	draining  atomic.Bool
	watcher   *registry.Watcher
	edge      *edge.Edge
	push      *push.Server // the edge's push side
	pushTCP   net.Listener // --push-tcp-listen; nil: none
	worker    *workers.Worker
	accessLog *otel.LineWriter // the access log's buffer, written out at shutdown
	// firing is what the alerts this node judges say now (runAlerts);
	// nil: it does not judge them.
	firing atomic.Pointer[[]string]
	// jobQueues are the async job queues as this edge last read them
	// (watchJobs); nil: none read, or no API takes async calls.
	jobQueues atomic.Pointer[jobQueues]

	edgeSrv, adminSrv *http.Server
	edgeURL           string     // where the edge listens, for the demo's hint
	errc              chan error // a listener's Serve returned
	// undo holds what the start steps started, undone in reverse order
	// when run returns.
	undo []func()
}

// namedLink is a data-plane connection's Link, with what /readyz calls it.
type namedLink struct {
	name string
	link *bus.Link
}

// connectLinked is connect for a connection calls ride on (the edge's,
// the worker's): its Link follows it, finds a server that stopped
// answering from the calls' evidence, and tells /readyz.
func (n *node) connectLinked(ctx context.Context, url, name, user string) (*nats.Conn, *bus.Link, error) {
	l := bus.NewLink(bus.LinkOptions{Quiet: n.cfg.natsProbeAfter, ProbeTimeout: n.cfg.natsProbeTimeout, Logger: n.log})
	nc, err := n.dial(ctx, url, name, user, l)
	if err != nil {
		return nil, nil, err
	}
	lctx, stop := context.WithCancel(context.Background())
	n.onExit(stop)
	l.Start(lctx, nc)
	n.links = append(n.links, namedLink{strings.TrimPrefix(name, "jetway-"), l})
	return nc, l, nil
}

func (n *node) connect(ctx context.Context, url, name, user string) (*nats.Conn, error) {
	return n.dial(ctx, url, name, user, nil)
}

func (n *node) dial(ctx context.Context, url, name, user string, link *bus.Link) (*nats.Conn, error) {
	var extra []nats.Option
	if n.inproc != nil {
		extra = append(extra, nats.InProcessServer(n.inproc))
		// In memory there is nothing to encrypt; a tls:// URL (the
		// embedded server listening with TLS) would make nats.go insist.
		if rest, ok := strings.CutPrefix(url, "tls://"); ok {
			url = "nats://" + rest
		}
	} else {
		extra = append(extra, n.cfg.natsOpts...) // TLS and credentials to a NATS over the network
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
		pools = n.cfg.pools // its pool set's inbox (bus.InboxPrefix)
	}
	nc, err := bus.Connect(ctx, url, bus.ConnectOptions{Name: name, Wait: true, Logger: n.log, Extra: extra, Role: user, Pools: pools,
		PingInterval: n.cfg.natsPing, MaxPingsOut: n.cfg.natsPingsOut, Link: link})
	if err != nil {
		return nil, err
	}
	n.conns = append(n.conns, nc)
	return nc, nil
}

// onExit registers f to run when run returns, before what was registered
// earlier.
func (n *node) onExit(f func()) { n.undo = append(n.undo, f) }

// run starts the node's parts in order, each step skipping what its role
// does not run, then waits for a signal or a failed listener and shuts
// down. The config was checked before: a step fails only on what cannot be
// known beforehand (a taken port, an unreachable NATS).
func (n *node) run(ctx context.Context) error {
	defer func() {
		for i := len(n.undo) - 1; i >= 0; i-- {
			n.undo[i]()
		}
	}()
	n.onExit(func() {
		for _, nc := range n.conns {
			nc.Close()
		}
	})
	for _, start := range []func(context.Context) error{
		n.startNATS,
		n.startTracing,
		n.connectRegistry,
		n.openAdmin,
		n.startEdge,
		n.startWorker,
		n.watchRegistry,
		n.heartbeat,
		n.listenEdge,
		n.listenPushTCP,
		n.listenAdmin,
		n.startDemo,
	} {
		if err := start(ctx); err != nil {
			return err
		}
	}
	return n.wait(ctx)
}

// startNATS starts serve's embedded NATS server, unless a NATS URL is
// given; with --nats-auth it first loads or makes the role passwords.
func (n *node) startNATS(context.Context) error {
	n.natsURL = n.cfg.natsURL
	if n.role != roleServe || n.natsURL != "" {
		return nil
	}
	cfg := bus.EmbeddedConfig{Listen: n.cfg.natsListen, DataDir: n.cfg.dataDir, TLS: n.cfg.natsServerTLS}
	if n.cfg.natsAuth {
		path := filepath.Join(n.cfg.dataDir, "nats-credentials.json")
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
	n.onExit(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	n.natsURL = ns.ClientURL()
	if n.cfg.inProcess {
		n.inproc = ns
	}
	n.log.Info("embedded nats started", "url", n.natsURL, "data", filepath.Join(n.cfg.dataDir, "nats"), "tls", cfg.TLS != nil)
	return nil
}

// startTracing announces the tracer provider the config built, and flushes
// it at exit (within 5 s), before the embedded NATS stops.
func (n *node) startTracing(context.Context) error {
	tp := n.cfg.tracing
	if tp == nil {
		return nil
	}
	n.log.Info("tracing on: exporting spans over OTLP")
	n.onExit(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	})
	return nil
}

// connectRegistry connects the registry's connection and sets up the
// watcher of the registry (it runs in watchRegistry, once every part has
// subscribed to its changes).
func (n *node) connectRegistry(ctx context.Context) error {
	ctl, err := n.connect(ctx, n.natsURL, "jetway-"+string(n.role)+"-registry", bus.UserAdmin)
	if err != nil {
		return err
	}
	n.ctl = ctl
	wopts := registry.WatcherOptions{
		Conn:         ctl,
		SnapshotFile: filepath.Join(n.cfg.dataDir, "registry-"+string(n.role)+".json"),
		Bucket:       registry.BucketOptions{Replicas: n.cfg.replicas},
		Logger:       n.log,
	}
	switch {
	case n.role == roleWorker || n.role == roleAdmin:
		// jetway admin reads the registry through its client; its watch
		// is for readiness, and keeps no app secrets or TLS keys on disk.
		// A worker's NATS user reads only what workers need: never the
		// apps and their signing secrets.
		wopts.Buckets = []string{registry.BucketAPIs, registry.BucketFlags}
	case n.cfg.certs == nil:
		// An edge without TLS has no use for the certificates' keys, in
		// memory or in its snapshot file.
		wopts.Buckets = []string{registry.BucketAPIs, registry.BucketFlags, registry.BucketAlerts, registry.BucketApps, registry.BucketJSONSchemas, registry.BucketTopics}
	}
	n.watcher = registry.NewWatcher(wopts)
	return nil
}

// openAdmin opens the registry client of jetway admin, which serves the
// admin API (serve's is opened with its edge, createBuckets).
func (n *node) openAdmin(ctx context.Context) error {
	if n.role != roleAdmin {
		return nil
	}
	n.createBuckets(ctx)
	if n.registry == nil {
		return errors.New("jetway admin: the registry cannot be opened (is the NATS user the admin's?)")
	}
	return nil
}

// startEdge builds the edge of serve and edge, with its metrics, and
// has it follow the registry.
func (n *node) startEdge(ctx context.Context) error {
	if !n.role.hasEdge() {
		return nil
	}
	nc, link, err := n.connectLinked(ctx, n.natsURL, "jetway-edge", bus.UserEdge)
	if err != nil {
		return err
	}
	sites, err := n.startFailover(ctx, nc, link)
	if err != nil {
		return err
	}
	f := n.cfg
	n.metrics = otel.NewMetrics(n.id, string(n.role))
	eo := edge.Options{Conn: nc, Link: link, Sites: sites, Serving: n.serving, Logger: n.log, MaxInFlight: f.maxInFlight, Metrics: n.metrics, TrustedProxies: f.trusted, Wire: n.wire, Certs: f.certs}
	eo.IPRules = &edge.IPRules{Allow: f.allow, Deny: f.deny}
	eo.Nonces = registry.NewNonceStore(n.ctl, registry.BucketOptions{Replicas: f.replicas})
	if n.role == roleServe {
		n.createBuckets(ctx)
	}
	if n.cfg.tracing != nil {
		eo.Tracing = n.cfg.tracing
	}
	if f.accessLog && f.logOut != nil {
		// The access log has its own logger, the same format and level,
		// writing into a buffer rather than a syscall per call; the
		// process log stays unbuffered, so an error is seen at once.
		n.accessLog = otel.NewLineWriter(f.logOut, otel.DefaultLineBuffer, otel.DefaultLineFlush)
		n.onExit(func() { _ = n.accessLog.Close() })
		al, err := newLogger(n.accessLog, f.logFormat, f.logLevel)
		if err != nil {
			return err
		}
		eo.AccessLog = al.With("role", string(n.role), "log", "access")
		n.metrics.CountAccessLogDrops(n.accessLog.Dropped)
	}
	if n.push, err = push.New(push.Options{Conn: nc, Logger: n.log,
		MaxConnsPerApp: f.pushPerApp, MaxConnsPerIP: f.pushPerIP, ConnectRate: f.pushConnectRate,
		CommandsPerSecond: f.pushCommandsPerSecond, ClusterMaxConnsPerApp: f.pushClusterPerApp, ClusterMaxConnsPerIP: f.pushClusterPerIP, NodeID: n.id}); err != nil {
		return err
	}
	eo.Push = n.push
	if n.edge, err = edge.New(eo); err != nil {
		return err
	}
	if err := n.publishMetrics(nc); err != nil {
		return err
	}
	n.watcher.OnChange(n.edge.Apply)
	go func() { _ = n.edge.Run(ctx) }()
	return nil
}

// createBuckets makes every registry bucket up front: serve is the admin
// node, and edges and workers on an authenticated NATS may not create them.
func (n *node) createBuckets(ctx context.Context) {
	bo := registry.BucketOptions{Replicas: n.cfg.replicas}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := registry.NewClient(octx, n.ctl, bo)
	cancel()
	if err != nil {
		n.log.Warn("creating registry buckets", "err", err)
	} else {
		n.registry = c.As(string(n.role) + ":" + n.id) // the admin API's client (each request writes as its token)
		if err := c.PushStreamsErr(); err != nil {
			n.log.Warn("push unavailable: its streams could not be created; APIs are served", "err", err)
		}
		if err := c.JobStreamsErr(); err != nil {
			n.log.Warn("async jobs unavailable: their streams could not be created; APIs are served", "err", err)
		}
	}
	if hook := n.cfg.changeWebhook; hook != "" {
		js, err := jetstream.New(n.ctl)
		if err == nil {
			go func() {
				if err := deliverChanges(ctx, js, hook, n.log); err != nil {
					n.log.Error("registry changes not delivered", "err", err)
				}
			}()
		}
	}
	if js, err := jetstream.New(n.ctl); err == nil {
		if _, err := otel.EnsureSLAStream(ctx, js, otel.SLAStreamOptions{Replicas: n.cfg.replicas}); err != nil {
			n.log.Warn("sla records: the stream could not be created", "err", err)
		}
	}
	go runReportScheduler(ctx, n.ctl, n.id, n.cfg.replicas, n.log) // scheduled SLA reports, one node at a time (reportsched.go)
	// A deleted nonce bucket would leave signed APIs refused on
	// every edge whose user may not create it: re-create it.
	if err := registry.KeepNonces(ctx, n.ctl, bo, func(err error) {
		n.log.Warn("re-creating the nonce bucket", "err", err)
	}); err != nil {
		n.log.Warn("watching the nonce bucket", "err", err)
	}
}

// serving is edge.Options.Serving: whether the heartbeats say a worker of
// pool is live. The tracker starts after the edge is built, before any
// call.
func (n *node) serving(pool string) bool {
	return n.tracker != nil && n.tracker.Serving(pool, time.Now())
}

// publishMetrics sends the edge's per-second records to the cluster and
// answers jetway metric's queries, until exit.
func (n *node) publishMetrics(nc *nats.Conn) error {
	stopMetrics := make(chan struct{})
	n.onExit(func() { close(stopMetrics) })
	pub := nc // an edge's user may publish only edge metrics: serve's go as the admin
	if n.role == roleServe {
		pub = n.ctl
	}
	go n.metrics.Run(stopMetrics, func(rs []otel.Record) {
		if b, err := json.Marshal(rs); err == nil {
			_ = pub.Publish(otel.MetricsSubjectPrefix+string(n.role)+"."+n.id, b)
		}
	})
	sjs, err := jetstream.New(pub)
	if err != nil {
		return fmt.Errorf("sla records: %w", err)
	}
	so := otel.SLAOptions{JS: sjs, Node: n.id, Breakers: nc, Log: n.log}
	if n.role == roleServe {
		so.Stream = &otel.SLAStreamOptions{Replicas: n.cfg.replicas}
	}
	if n.sla, err = otel.StartSLARecorder(n.metrics, so); err != nil {
		return err
	}
	n.onExit(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n.sla.Stop(ctx) // at once when shutdown stopped it already
	})
	// jetway metric asks every edge for an API's recent records.
	if _, err := nc.Subscribe(otel.MetricsQuerySubject, func(m *nats.Msg) {
		if b := n.metrics.AnswerQuery(m.Data, time.Now()); b != nil && m.Reply != "" {
			_ = m.Respond(b)
		}
	}); err != nil {
		return fmt.Errorf("answering metric queries: %w", err)
	}
	return nil
}

// startWorker builds the workers of serve (every pool) and worker (its
// pools), following the registry.
func (n *node) startWorker(ctx context.Context) error {
	if n.role != roleServe && n.role != roleWorker {
		return nil
	}
	nc, link, err := n.connectLinked(ctx, n.natsURL, "jetway-worker", bus.UserWorker)
	if err != nil {
		return err
	}
	wo := workers.Options{Conn: nc, Link: link, Pools: n.cfg.pools, Logger: n.log, Wire: n.wire, JobAckWait: n.cfg.jobAckWait}
	if n.cfg.tracing != nil {
		wo.Tracing = n.cfg.tracing
	}
	if n.worker, err = workers.New(wo); err != nil {
		return err
	}
	n.watcher.OnChange(n.worker.Apply)
	return nil
}

// watchRegistry runs the registry watch. It ends at shutdown, before the
// connections are drained, or at exit.
func (n *node) watchRegistry(context.Context) error {
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	n.onExit(cancel)
	// Stopping waits until Run has returned (its consumers removed), or
	// the drain would race the watch's teardown and log its consumers as
	// lost.
	n.stopWatch = func(ctx context.Context) {
		cancel()
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	go func() { defer close(done); _ = n.watcher.Run(wctx) }()
	return nil
}

// heartbeat sends this node's heartbeats, tracks the live set of all nodes
// for /nodes, and (with an edge) evaluates the alert rules.
func (n *node) heartbeat(ctx context.Context) error {
	beater, err := bus.NewHeartbeat(n.ctl, bus.Heartbeat{ID: n.id, Role: string(n.role), Pools: n.cfg.pools, Version: version, Wire: bus.WireVersion, Admin: n.cfg.admin},
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
	beater.Detail(n.beatDetail)
	n.beatDone = make(chan struct{})
	go func() { defer close(n.beatDone); _ = beater.Run(ctx) }()
	n.tracker = bus.NewTracker(n.ctl, bus.DefaultHeartbeatPeriod)
	if err := n.tracker.Start(); err != nil {
		return err
	}
	n.onExit(n.tracker.Stop)
	// Requests are written in the highest version every live worker reads.
	go n.wire.Follow(ctx, n.tracker)
	if n.edge != nil {
		go n.watchJobs(ctx, n.ctl)
		go func() {
			if err := n.runAlerts(ctx, n.ctl); err != nil {
				n.log.Error("alerts not evaluated", "err", err)
			}
		}()
	}
	return nil
}

// beatDetail says in a beat what the console shows of the node: a
// worker's open breakers, the alerts firing (the judging node's), and an
// edge's active site when it has a standby.
func (n *node) beatDetail(hb *bus.Heartbeat) {
	if n.worker != nil {
		hb.Breakers = n.worker.OpenBreakers(time.Now())
	}
	if f := n.firing.Load(); f != nil {
		hb.Alerts = *f
	}
	if f := n.failover; f != nil {
		active, _ := f.sites.Active()
		hb.Site = f.sites.Name(active)
	}
}

// listenEdge serves the edge on --listen.
func (n *node) listenEdge(ctx context.Context) error {
	n.edgeURL = "http://127.0.0.1:8080"
	if n.role == roleAdmin {
		n.edgeURL = n.cfg.edgeURL // "": none
	}
	if n.edge == nil {
		return nil
	}
	f := n.cfg
	n.edgeSrv = &http.Server{
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
	ln = edge.LimitListener(ln, f.maxConns)
	srv := n.edgeSrv
	if f.certs != nil {
		// TLS: HTTP/2 and HTTP/1.1 (under the framing guard) on one
		// server; the certificates follow their files.
		if len(f.acmeHosts) > 0 {
			m, err := n.acmeManager(ctx)
			if err != nil {
				return err
			}
			f.certs.UseACME(m)
		}
		cfg := f.certs.TLSConfig()
		if f.tlsClientCerts {
			cfg.ClientAuth = tls.RequestClientCert // verified per API (auth mtls)
		}
		tl := edge.ListenTLS(ln, cfg, f.readHeaderTimeout, f.maxHeaderBytes)
		go f.certs.Watch(ctx, time.Second)
		go f.certs.Staple(ctx, time.Minute, nil) // OCSP answers for certificates that name a responder
		n.log.Info("edge listening", "addr", ln.Addr().String(), "tls", true)
		n.edgeURL = "https://" + localAddr(ln.Addr())
		go func() { n.errc <- srv.Serve(tl.HTTP1()) }()
		go func() { n.errc <- srv.Serve(tl.HTTP2()) }()
		return nil
	}
	if f.h2c {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	ln = edge.GuardFraming(ln, f.maxHeaderBytes)
	n.log.Info("edge listening", "addr", ln.Addr().String())
	n.edgeURL = "http://" + localAddr(ln.Addr())
	go func() { n.errc <- srv.Serve(ln) }()
	return nil
}

// listenPushTCP serves push subscriptions over raw TCP on
// --push-tcp-listen, unless it is empty; over TLS when the edge is.
func (n *node) listenPushTCP(context.Context) error {
	f := n.cfg
	if n.edge == nil || f.pushTCPListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", f.pushTCPListen)
	if err != nil {
		return fmt.Errorf("push tcp listener: %w", err)
	}
	n.pushTCP = ln
	ln = edge.LimitListener(ln, f.maxConns)
	if f.certs != nil {
		cfg := f.certs.TLSConfig()
		cfg.NextProtos = nil // not HTTP
		if f.tlsClientCerts {
			cfg.ClientAuth = tls.RequestClientCert
		}
		ln = tls.NewListener(ln, cfg)
	}
	n.log.Info("push tcp listening", "addr", n.pushTCP.Addr().String(), "tls", f.certs != nil)
	go func() {
		if err := n.edge.ServeTCP(ln); !errors.Is(err, net.ErrClosed) {
			n.errc <- err
		}
	}()
	return nil
}

// acmeManager is the ACME client of --acme-host: its account and
// certificates live in the registry bucket jetway_acme, so that what one
// edge obtained every edge serves.
func (n *node) acmeManager(ctx context.Context) (*autocert.Manager, error) {
	f := n.cfg
	js, err := jetstream.New(n.ctl)
	if err != nil {
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kv, err := registry.OpenACME(octx, js, registry.BucketOptions{Replicas: f.replicas})
	if err != nil {
		return nil, fmt.Errorf("acme: %w (serve or jetway api put creates the bucket)", err)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	if f.acmeCARoot != "" {
		pool, err := bus.LoadCertPool(f.acmeCARoot)
		if err != nil {
			return nil, err
		}
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	n.log.Info("acme on", "hosts", []string(f.acmeHosts), "ca", f.acmeCA)
	return &autocert.Manager{
		Prompt:     autocert.AcceptTOS,
		Cache:      registry.ACMECache{KV: kv},
		HostPolicy: autocert.HostWhitelist(f.acmeHosts...),
		Email:      f.acmeEmail,
		Client:     &acme.Client{DirectoryURL: f.acmeCA, HTTPClient: client},
	}, nil
}

// listenAdmin serves the admin listener on --admin, unless it is empty.
func (n *node) listenAdmin(context.Context) error {
	f := n.cfg
	if f.admin == "" {
		return nil
	}
	var h http.Handler = n.adminHandler()
	if f.adminToken != "" {
		h = requireToken(f.adminToken, h)
	}
	if n.registry != nil {
		// serve holds the admin NATS user: it serves the admin REST API,
		// which checks its own tokens on every request.
		boot, err := n.adminBootstrapToken()
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/v1/", admin.New(admin.Options{Client: n.registry, Bootstrap: boot, Logger: n.log, Conn: n.ctl, Nodes: n.tracker.Nodes, EdgeURL: n.edgeURL}).Handler())
		mux.Handle("/console/", admin.Console())
		mux.Handle("/console", admin.Console())
		mux.Handle("/", h)
		h = mux
	}
	// A body trickled in holds a connection at most ReadTimeout.
	n.adminSrv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second}
	ln, err := net.Listen("tcp", f.admin)
	if err != nil {
		return fmt.Errorf("admin listener: %w", err)
	}
	if n.cfg.adminTLS != nil {
		ln = tls.NewListener(ln, n.cfg.adminTLS)
	}
	n.log.Info("admin listening", "addr", ln.Addr().String(), "tls", n.cfg.adminTLS != nil)
	srv := n.adminSrv
	go func() { n.errc <- srv.Serve(ln) }()
	return nil
}

// startDemo starts serve --demo's backend and publishes its APIs.
func (n *node) startDemo(ctx context.Context) error {
	if !n.cfg.demo {
		return nil
	}
	stopDemo, err := startDemo(ctx, n.ctl, n.watcher, n.log, n.edgeURL)
	if err != nil {
		return err
	}
	n.onExit(stopDemo)
	return nil
}

// wait blocks until a signal or a listener fails, then shuts down.
func (n *node) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
	case err := <-n.errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	return n.shutdown()
}

// shutdown drains in order: the edge stops accepting and lets its calls
// finish, then workers drain their subscriptions and finish theirs, then the
// connections are drained.
func (n *node) shutdown() error {
	n.draining.Store(true)
	n.log.Info("shutting down", "drain_timeout", n.cfg.drain)
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.drain)
	defer cancel()
	var errs []error
	if n.pushTCP != nil {
		_ = n.pushTCP.Close() // no new TCP subscriptions; the open ones end below
	}
	if n.push != nil {
		// Push clients are told to reconnect (elsewhere, with their
		// cursor); their streams would otherwise hold the drain open.
		if err := n.push.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("closing push connections: %w", err))
		}
	}
	if n.edgeSrv != nil {
		if err := n.edgeSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("draining edge: %w", err))
		}
	}
	if n.accessLog != nil {
		// The edge's calls have ended: write out their lines (a call
		// that outlived the drain timeout logs straight through).
		_ = n.accessLog.Close()
	}
	if n.sla != nil {
		n.sla.Stop(ctx) // the minute under way, stored before the connections drain
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
		n.stopWatch(ctx)
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
	if n.adminSrv != nil {
		_ = n.adminSrv.Close()
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
