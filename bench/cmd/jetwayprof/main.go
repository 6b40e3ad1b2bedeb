// Command jetwayprof runs the same parts as `jetway serve` in one process —
// embedded nats-server with JetStream, a registry watcher, an edge and a
// worker on their own NATS connections, the edge's HTTP server with the same
// settings — plus net/http/pprof on --pprof, so that Jetway's CPU can be
// profiled under load. It publishes one API, GET /hello -> --backend/hello.
//
//	jetwayprof --listen 127.0.0.1:9100 --pprof 127.0.0.1:9101 --backend http://127.0.0.1:9000
//	go tool pprof -top http://127.0.0.1:9101/debug/pprof/profile?seconds=10
//
// bench/profile.sh drives it with wrk.
package main

import (
	"context"
	"flag"
	"log"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // on the --pprof listener only (DefaultServeMux)
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9100", "edge HTTP address")
	pprofAddr := flag.String("pprof", "127.0.0.1:9101", "net/http/pprof address")
	natsListen := flag.String("nats-listen", "127.0.0.1:0", "embedded NATS client address")
	backend := flag.String("backend", "http://127.0.0.1:9000", "backend base URL (GET /hello)")
	data := flag.String("data", "", "data folder (default: a temp dir, removed at exit)")
	flag.Parse()
	if err := run(*listen, *pprofAddr, *natsListen, *backend, *data); err != nil {
		log.Fatal(err)
	}
}

func run(listen, pprofAddr, natsListen, backend, data string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if data == "" {
		d, err := os.MkdirTemp("", "jetwayprof-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		data = d
	}
	ns, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: natsListen, DataDir: data})
	if err != nil {
		return err
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	connect := func(name string) (*nats.Conn, error) {
		return bus.Connect(ctx, ns.ClientURL(), bus.ConnectOptions{Name: name, Logger: logger})
	}
	ctl, err := connect("jetwayprof-registry")
	if err != nil {
		return err
	}
	defer ctl.Close()
	enc, err := connect("jetwayprof-edge")
	if err != nil {
		return err
	}
	defer enc.Close()
	wnc, err := connect("jetwayprof-worker")
	if err != nil {
		return err
	}
	defer wnc.Close()

	e, err := edge.New(edge.Options{Conn: enc, Logger: logger})
	if err != nil {
		return err
	}
	wk, err := workers.New(workers.Options{Conn: wnc, Logger: logger})
	if err != nil {
		return err
	}
	w := registry.NewWatcher(registry.WatcherOptions{
		Conn:         ctl,
		SnapshotFile: filepath.Join(data, "registry.json"),
		Logger:       logger,
	})
	w.OnChange(e.Apply)
	w.OnChange(wk.Apply)
	go func() { _ = w.Run(ctx) }()
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := w.WaitLive(wctx); err != nil {
		return err
	}
	c, err := registry.NewClient(wctx, ctl, registry.BucketOptions{})
	if err != nil {
		return err
	}
	doc := `{"name":"bench.hello","pool":"bench","route":{"method":"GET","path":"/hello"},
	  "backend":{"type":"http","url":"` + backend + `/hello"},"timeout":"5s","concurrency":4096}`
	if _, err := c.Put(wctx, []byte(doc)); err != nil {
		return err
	}

	srv := &http.Server{ // as cmd/jetway/node.go
		Handler:           e,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	go func() { _ = srv.Serve(ln) }()
	pln, err := net.Listen("tcp", pprofAddr)
	if err != nil {
		return err
	}
	go func() { _ = http.Serve(pln, nil) }()
	log.Printf("jetwayprof: edge on %s, pprof on %s, nats %s", ln.Addr(), pln.Addr(), ns.ClientURL())
	<-ctx.Done()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	_ = wk.Shutdown(sctx)
	return nil
}
