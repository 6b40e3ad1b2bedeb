package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bench/internal/benchsrv"
	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/internal/grpcdemo"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

// parallelism is b.SetParallelism's factor: GOMAXPROCS*parallelism client
// goroutines (16 on 2 cores) keep every stack busy without measuring queueing.
const parallelism = 8

// quiet is the logger of every node: benchmark output stays readable (the
// watchers log "watch closed" when the server stops first at cleanup).
var quiet = slog.New(slog.DiscardHandler)

// get does one GET and drains the body; it returns the status or an error.
func get(c *http.Client, u string) (int, error) {
	resp, err := c.Get(u)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

// runParallel drives u with the shared tuned client from parallel goroutines.
func runParallel(b *testing.B, u string) {
	c := benchsrv.Client()
	if code, err := get(c, u); err != nil || code != http.StatusOK {
		b.Fatalf("GET %s before the run: %d %v", u, code, err)
	}
	b.ReportAllocs()
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if code, err := get(c, u); err != nil || code != http.StatusOK {
				b.Errorf("GET %s: %d %v", u, code, err)
				return
			}
		}
	})
	b.StopTimer()
	c.CloseIdleConnections()
}

// backend starts the bench backend (the one run.sh uses) on httptest.
func backend(tb testing.TB) *httptest.Server {
	s := httptest.NewServer(benchsrv.Backend())
	tb.Cleanup(s.Close)
	return s
}

// jetway is an in-process Jetway: one edge and one worker, each on its own
// NATS connection as in `jetway serve`, fed by one registry watcher.
type jetway struct {
	ns      *server.Server
	edge    *edge.Edge
	worker  *workers.Worker
	watcher *registry.Watcher
	client  *registry.Client
	url     string // the edge's HTTP base URL
}

// startJetway wires nats-server, watcher, edge, worker and the edge's HTTP
// server, and publishes docs.
func startJetway(tb testing.TB, docs ...string) *jetway {
	tb.Helper()
	return startJetwayWith(tb, edge.Options{}, workers.Options{}, docs...)
}

// startJetwayWith is startJetway with extra edge and worker options (the
// connections and loggers are filled in).
func startJetwayWith(tb testing.TB, eo edge.Options, wo workers.Options, docs ...string) *jetway {
	tb.Helper()
	j := &jetway{ns: natstest.RunServer(tb)}
	// Registered after the server's cleanup, so it runs before it.
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	ctl := natstest.Connect(tb, j.ns)
	var err error
	eo.Conn, eo.Logger = natstest.Connect(tb, j.ns), quiet
	if eo.Link != nil { // a link asked for: one on the edge's connection, as every node has
		l := bus.NewLink(bus.LinkOptions{Logger: quiet})
		l.Start(ctx, eo.Conn)
		eo.Link = l
	}
	if j.edge, err = edge.New(eo); err != nil {
		tb.Fatal(err)
	}
	wo.Conn, wo.Logger = natstest.Connect(tb, j.ns), quiet
	if j.worker, err = workers.New(wo); err != nil {
		tb.Fatal(err)
	}
	j.watcher = registry.NewWatcher(registry.WatcherOptions{Conn: ctl, Logger: quiet})
	j.watcher.OnChange(j.edge.Apply)
	j.watcher.OnChange(j.worker.Apply)
	go func() { _ = j.watcher.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := j.watcher.WaitLive(wctx); err != nil {
		tb.Fatal(err)
	}
	if j.client, err = registry.NewClient(wctx, ctl, registry.BucketOptions{}); err != nil {
		tb.Fatal(err)
	}
	for _, d := range docs {
		if _, err := j.client.Put(wctx, []byte(d)); err != nil {
			tb.Fatalf("publishing %s: %v", d, err)
		}
	}
	srv := httptest.NewUnstartedServer(j.edge)
	srv.Config.ReadHeaderTimeout = 10 * time.Second
	srv.Config.MaxHeaderBytes = 64 << 10
	srv.Start()
	tb.Cleanup(srv.Close)
	j.url = srv.URL
	natstest.CheckFor(tb, 10*time.Second, time.Millisecond, func() error {
		if n := j.edge.Routes(); n < len(docs) {
			return fmt.Errorf("edge routes %d of %d apis", n, len(docs))
		}
		if n := len(j.worker.Subscribed()); n < len(docs) {
			return fmt.Errorf("worker serves %d of %d apis", n, len(docs))
		}
		return nil
	})
	return j
}

// helloAPI is the GET /hello API on the backend at base, as run.sh publishes it.
func helloAPI(base string) string {
	return `{"name":"bench.hello","pool":"bench","route":{"method":"GET","path":"/hello"},
	  "backend":{"type":"http","url":"` + base + `/hello"},"timeout":"5s","concurrency":4096}`
}

// mockAPI answers from the worker itself: the gateway without a backend call.
const mockAPI = `{"name":"bench.mock","pool":"bench","route":{"method":"GET","path":"/mock"},
  "backend":{"type":"mock","status":200,"json":{"message":"hello from the bench backend","ok":true,"n":42}},
  "concurrency":4096}`

// BenchmarkDirect: HTTP client -> backend. The floor every proxy adds to.
func BenchmarkDirect(b *testing.B) {
	be := backend(b)
	runParallel(b, be.URL+"/hello")
}

// BenchmarkJetway: HTTP client -> edge -> NATS -> worker -> HTTP backend.
func BenchmarkJetway(b *testing.B) {
	be := backend(b)
	j := startJetway(b, helloAPI(be.URL))
	runParallel(b, j.url+"/hello")
}

// BenchmarkJetwayGRPC: HTTP client -> edge -> NATS -> worker -> gRPC
// backend (grpc-go's test service, reflection on): the same call as
// BenchmarkJetway with a protobuf hop instead of an HTTP one.
func BenchmarkJetwayGRPC(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := grpcdemo.Start(l, "hello from the bench backend")
	b.Cleanup(s.Stop)
	j := startJetway(b, grpcAPI(l.Addr().String()))
	runParallel(b, j.url+"/hello-grpc")
}

// grpcAPI is the GET /hello-grpc API on the gRPC test service at addr, as
// run.sh publishes it.
func grpcAPI(addr string) string {
	return `{"name":"bench.grpc","pool":"bench","route":{"method":"GET","path":"/hello-grpc"},
	  "backend":{"type":"grpc","target":"` + addr + `","method":"grpc.testing.TestService/UnaryCall"},"timeout":"5s","concurrency":4096}`
}

// BenchmarkJetwayMock: HTTP client -> edge -> NATS -> worker (mock backend).
// Jetway's own cost, without the worker's HTTP call to a backend.
func BenchmarkJetwayMock(b *testing.B) {
	j := startJetway(b, mockAPI)
	runParallel(b, j.url+"/mock")
}

// BenchmarkJetwayMockLinked is BenchmarkJetwayMock with the edge's calls
// going through a bus.Link, as in every node (jetway serve, edge): the
// cost of carrying calls across a lost NATS connection.
func BenchmarkJetwayMockLinked(b *testing.B) {
	j := startJetwayWith(b, edge.Options{Link: bus.NewLink(bus.LinkOptions{})}, workers.Options{}, mockAPI)
	runParallel(b, j.url+"/mock")
}

// BenchmarkReverseProxy: HTTP client -> tuned httputil.ReverseProxy -> backend.
func BenchmarkReverseProxy(b *testing.B) {
	be := backend(b)
	u, _ := url.Parse(be.URL)
	rp := httptest.NewServer(benchsrv.ReverseProxy(u))
	b.Cleanup(rp.Close)
	runParallel(b, rp.URL+"/hello")
}

// propAPI is version v of the propagation API: its route path carries v, so
// an edge routes version v exactly when /prop/v<v> is no longer 404.
func propAPI(v int) string {
	return fmt.Sprintf(`{"name":"bench.prop","pool":"bench-prop","route":{"method":"GET","path":"/prop/v%d"},
	  "backend":{"type":"mock","status":200,"body":"v%d"}}`, v, v)
}

// routes reports whether e routes GET path. No worker serves the API, so a
// routed request fails fast with 503 NO_WORKERS; an unrouted one is 404.
func routes(e *edge.Edge, path string) bool {
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	return w.Code != http.StatusNotFound
}

// BenchmarkRegistryPropagation measures, per iteration, the time from
// registry.Client.Put of a changed API until both of two edges (each with
// its own watcher and NATS connection) route the new version. Polls every
// 200µs. Reports p50-ms and p99-ms (target: p99 < 100ms); for a stable p99
// use a fixed count, e.g. -benchtime=1000x.
func BenchmarkRegistryPropagation(b *testing.B) {
	ns := natstest.RunServer(b)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	var edges []*edge.Edge
	for range 2 {
		nc := natstest.Connect(b, ns)
		e, err := edge.New(edge.Options{Conn: nc, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		w := registry.NewWatcher(registry.WatcherOptions{Conn: nc, Logger: quiet})
		w.OnChange(e.Apply)
		go func() { _ = w.Run(ctx) }()
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		err = w.WaitLive(wctx)
		wcancel()
		if err != nil {
			b.Fatal(err)
		}
		edges = append(edges, e)
	}
	c, err := registry.NewClient(ctx, natstest.Connect(b, ns, nats.Name("publisher")), registry.BucketOptions{})
	if err != nil {
		b.Fatal(err)
	}
	const poll = 200 * time.Microsecond
	const giveUp = 5 * time.Second
	propagate := func(v int) time.Duration {
		path := fmt.Sprintf("/prop/v%d", v)
		start := time.Now()
		if _, err := c.Put(ctx, []byte(propAPI(v))); err != nil {
			b.Fatal(err)
		}
		pending := slices.Clone(edges)
		for {
			pending = slices.DeleteFunc(pending, func(e *edge.Edge) bool { return routes(e, path) })
			d := time.Since(start)
			if len(pending) == 0 {
				return d
			}
			if d > giveUp {
				b.Fatalf("version %d not routed by %d edge(s) after %v", v, len(pending), giveUp)
			}
			time.Sleep(poll)
		}
	}
	propagate(0) // warm-up: bucket, watchers, first snapshot
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		samples = append(samples, propagate(i+1))
	}
	b.StopTimer()
	slices.Sort(samples)
	pct := func(p float64) float64 {
		i := int(p * float64(len(samples)-1))
		return float64(samples[i]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(samples[len(samples)-1])/float64(time.Millisecond), "max-ms")
}

// TestTargets checks, quickly, that every benchmark target answers the
// same body, so the benchmarks cannot silently measure error responses.
func TestTargets(t *testing.T) {
	be := backend(t)
	j := startJetway(t, helloAPI(be.URL), mockAPI)
	u, _ := url.Parse(be.URL)
	rp := httptest.NewServer(benchsrv.ReverseProxy(u))
	t.Cleanup(rp.Close)
	c := benchsrv.Client()
	defer c.CloseIdleConnections()
	for name, target := range map[string]string{
		"direct":   be.URL + "/hello",
		"jetway":   j.url + "/hello",
		"mock":     j.url + "/mock",
		"revproxy": rp.URL + "/hello",
	} {
		resp, err := c.Get(target)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d: %s", name, resp.StatusCode, body)
		}
		if want := `{"message":"hello from the bench backend","ok":true,"n":42}`; string(body[:min(len(body), len(want))]) != want {
			t.Errorf("%s: body %q, want %q", name, body, want)
		}
	}
}
