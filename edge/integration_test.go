package edge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/otel"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

// gateway is an edge and a worker over a real nats-server, as in
// `jetway serve`, with the edge behind a real HTTP server.
type gateway struct {
	t       *testing.T
	url     string
	client  *registry.Client
	nc      *nats.Conn
	edgeW   *registry.Watcher
	edge    *edge.Edge
	worker  *workers.Worker
	metrics *otel.Metrics
}

func newGateway(t *testing.T, pools ...string) *gateway {
	t.Helper()
	return newGatewayWith(t, edge.Options{}, pools...)
}

// newGatewayWith is newGateway with edge options (connection and metrics
// are filled in).
func newGatewayWith(t *testing.T, eo edge.Options, pools ...string) *gateway {
	t.Helper()
	s := natstest.RunServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	g := &gateway{t: t, nc: natstest.Connect(t, s)}
	var err error
	if g.client, err = registry.NewClient(ctx, g.nc, registry.BucketOptions{}); err != nil {
		t.Fatal(err)
	}
	g.metrics = otel.NewMetrics("test-edge", "edge")
	eo.Conn, eo.Metrics = natstest.Connect(t, s), g.metrics
	e, err := edge.New(eo)
	if err != nil {
		t.Fatal(err)
	}
	g.edge = e
	g.edgeW = registry.NewWatcher(registry.WatcherOptions{Conn: natstest.Connect(t, s)})
	g.edgeW.OnChange(e.Apply)
	g.worker = g.addWorker(ctx, s.ClientURL(), pools...)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = g.edgeW.Run(ctx) }()
	go func() { defer wg.Done(); _ = e.Run(ctx) }()
	srv := httptest.NewServer(e)
	g.url = srv.URL
	t.Cleanup(func() { srv.Close(); cancel(); wg.Wait() })
	if err := g.edgeW.WaitLive(ctx); err != nil {
		t.Fatal(err)
	}
	return g
}

// addWorker starts a worker with its own watcher and connection.
func (g *gateway) addWorker(ctx context.Context, url string, pools ...string) *workers.Worker {
	nc, err := nats.Connect(url)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(nc.Close)
	w, err := workers.New(workers.Options{Conn: nc, Pools: pools})
	if err != nil {
		g.t.Fatal(err)
	}
	rw := registry.NewWatcher(registry.WatcherOptions{Conn: nc})
	rw.OnChange(w.Apply)
	go func() { _ = rw.Run(ctx) }()
	return w
}

// publish puts an entry and waits until both the edge and the worker have it.
func (g *gateway) publish(doc string) *registry.API {
	g.t.Helper()
	a, err := g.client.Put(context.Background(), []byte(doc))
	if err != nil {
		g.t.Fatalf("publishing: %v", err)
	}
	natstest.CheckFor(g.t, 3*time.Second, 2*time.Millisecond, func() error {
		if got := g.edgeW.Current().APIs[a.Name]; got == nil || got.Revision != a.Revision {
			return fmt.Errorf("edge has not applied %s@%d", a.Name, a.Revision)
		}
		if rev, ok := g.worker.Serving(a.Name); !ok || rev != a.Revision {
			return fmt.Errorf("worker not serving %s@%d", a.Name, a.Revision)
		}
		return nil
	})
	// The worker's subscription must have reached the server.
	if err := g.nc.Flush(); err != nil {
		g.t.Fatal(err)
	}
	return a
}

// testClient bounds every test request: a test must fail, never hang.
var testClient = &http.Client{Timeout: 20 * time.Second}

type result struct {
	status int
	header http.Header
	body   string
	code   string
}

func (g *gateway) do(method, path string, body io.Reader, hdr ...string) result {
	g.t.Helper()
	req, err := http.NewRequest(method, g.url+path, body)
	if err != nil {
		g.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := testClient.Do(req)
	if err != nil {
		g.t.Error(err) // not Fatal: do runs in goroutines too
		return result{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := result{status: resp.StatusCode, header: resp.Header, body: string(b)}
	var e struct {
		Code      string `json:"code"`
		RequestID string `json:"request_id"`
	}
	if json.Unmarshal(b, &e) == nil {
		r.code = e.Code
	}
	return r
}

func TestProxiesRequestAndResponse(t *testing.T) {
	var seen atomic.Pointer[http.Request]
	var seenBody atomic.Value
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen.Store(r)
		seenBody.Store(string(b))
		w.Header().Set("X-Backend", "yes")
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		w.Header().Set("Jetway-Status", "999") // reserved: must not leak
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "got %s %s", r.Method, r.URL.RequestURI())
	}))
	defer backend.Close()
	g := newGateway(t)
	g.publish(`{"name":"orders.update","pool":"orders","route":{"method":"PUT","path":"/v1/orders/{id}/items/{item}"},
		"backend":{"type":"http","url":"` + backend.URL + `/o/{id}/i/{item}?src=gw"}}`)

	r := g.do("PUT", "/v1/orders/a%20b/items/7?x=1&y=%2F", strings.NewReader(`{"qty":2}`),
		"Content-Type", "application/json", "X-Custom", "c", "Connection", "X-Hop", "X-Hop", "secret",
		"Jetway-App", "forged", "X-Forwarded-For", "6.6.6.6", "X-Request-Id", "req-123")
	if r.status != 201 || r.body != "got PUT /o/a%20b/i/7?src=gw&x=1&y=%2F" {
		t.Fatalf("got %d %q", r.status, r.body)
	}
	if r.header.Get("X-Backend") != "yes" || len(r.header.Values("Set-Cookie")) != 2 || r.header.Get("Jetway-Status") != "" {
		t.Errorf("response headers %v", r.header)
	}
	if r.header.Get("X-Request-Id") != "req-123" {
		t.Errorf("request id not kept: %v", r.header.Get("X-Request-Id"))
	}
	in := seen.Load()
	if seenBody.Load() != `{"qty":2}` || in.Header.Get("Content-Type") != "application/json" || in.Header.Get("X-Custom") != "c" {
		t.Errorf("backend saw body %q headers %v", seenBody.Load(), in.Header)
	}
	if in.Header.Get("X-Hop") != "" || in.Header.Get("Jetway-App") != "" || in.Header.Get("X-Request-Id") != "req-123" {
		t.Errorf("hop-by-hop, reserved or request id headers wrong: %v", in.Header)
	}
	if xff := in.Header.Get("X-Forwarded-For"); xff != "127.0.0.1" {
		t.Errorf("X-Forwarded-For %q: a client's own value must not be trusted", xff)
	}
}

func TestBackendErrorsPassThroughUntouched(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(503)
		io.WriteString(w, "backend says no")
	}))
	defer backend.Close()
	g := newGateway(t)
	g.publish(`{"name":"b","pool":"p","route":{"path":"/b"},"backend":{"type":"http","url":"` + backend.URL + `"}}`)
	r := g.do("GET", "/b", nil)
	if r.status != 503 || r.body != "backend says no" || r.code != "" || r.header.Get("Content-Type") != "text/plain" {
		t.Fatalf("got %d %q code=%q", r.status, r.body, r.code)
	}
}

func TestGatewayErrors(t *testing.T) {
	release := make(chan struct{})
	var hits atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/hang" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "ok")
	}))
	defer backend.Close()
	defer close(release)
	g := newGateway(t, "main")
	g.publish(`{"name":"small","pool":"main","route":{"method":"POST","path":"/small"},"max_body":"1KiB",
		"backend":{"type":"http","url":"` + backend.URL + `/small"}}`)
	g.publish(`{"name":"hang","pool":"main","route":{"path":"/hang"},"timeout":"200ms","concurrency":2,
		"backend":{"type":"http","url":"` + backend.URL + `/hang"}}`)
	g.publish(`{"name":"down","pool":"main","route":{"path":"/down"},"backend":{"type":"http","url":"http://127.0.0.1:1/x"}}`)
	// An API of a pool no worker serves.
	a, err := g.client.Put(context.Background(), []byte(`{"name":"orphan","pool":"nobody","route":{"path":"/orphan"},"timeout":"5s","backend":{"type":"mock"}}`))
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 3*time.Second, 2*time.Millisecond, func() error {
		if g.edgeW.Current().APIs["orphan"] == nil || g.edgeW.Current().Revision < a.Revision {
			return fmt.Errorf("orphan not applied")
		}
		return nil
	})

	t.Run("route not found", func(t *testing.T) {
		r := g.do("GET", "/nope", nil)
		if r.status != 404 || r.code != "ROUTE_NOT_FOUND" || !strings.Contains(r.body, `"request_id":"`) {
			t.Fatalf("got %d %s", r.status, r.body)
		}
	})
	t.Run("method not allowed", func(t *testing.T) {
		if r := g.do("GET", "/small", nil); r.status != 405 || r.code != "METHOD_NOT_ALLOWED" {
			t.Fatalf("got %d %s", r.status, r.body)
		}
	})
	t.Run("path not canonical", func(t *testing.T) {
		if r := g.do("GET", "/hang/%2e%2e/small", nil); r.status != 400 || r.code != "BAD_REQUEST" {
			t.Fatalf("got %d %s", r.status, r.body)
		}
	})
	t.Run("body too large", func(t *testing.T) {
		before := hits.Load()
		if r := g.do("POST", "/small", strings.NewReader(strings.Repeat("x", 2048))); r.status != 413 || r.code != "PAYLOAD_TOO_LARGE" {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		// Without a Content-Length (chunked), the limit holds too.
		if r := g.do("POST", "/small", io.MultiReader(strings.NewReader(strings.Repeat("x", 2048)))); r.status != 413 {
			t.Fatalf("chunked: got %d %s", r.status, r.body)
		}
		if hits.Load() != before {
			t.Fatal("the backend saw a request over the limit")
		}
		if r := g.do("POST", "/small", strings.NewReader(strings.Repeat("x", 1024))); r.status != 200 {
			t.Fatalf("at the limit: got %d %s", r.status, r.body)
		}
	})
	t.Run("no workers", func(t *testing.T) {
		start := time.Now()
		r := g.do("GET", "/orphan", nil)
		if r.status != 503 || r.code != "NO_WORKERS" {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("NO_WORKERS took %v: it must not wait for the 5s timeout", d)
		}
	})
	t.Run("backend unreachable", func(t *testing.T) {
		r := g.do("GET", "/down", nil)
		if r.status != 502 || r.code != "BAD_GATEWAY" || strings.Contains(r.body, "127.0.0.1:1") {
			t.Fatalf("got %d %s", r.status, r.body)
		}
	})
	t.Run("timeout and overload", func(t *testing.T) {
		var wg sync.WaitGroup
		results := make([]result, 2)
		for i := range results {
			wg.Add(1)
			go func() { defer wg.Done(); results[i] = g.do("GET", "/hang", nil) }()
		}
		// Both slots are taken once the worker reports them in flight.
		natstest.CheckFor(t, time.Second, time.Millisecond, func() error {
			if n := g.worker.InFlight(); n != 2 {
				return fmt.Errorf("in flight %d", n)
			}
			return nil
		})
		r := g.do("GET", "/hang", nil)
		wg.Wait()
		if r.status != 503 || r.code != "OVERLOADED" {
			t.Errorf("third call: got %d %s", r.status, r.body)
		}
		for _, r := range results {
			if r.status != 504 || r.code != "GATEWAY_TIMEOUT" {
				t.Errorf("hung call: got %d %s", r.status, r.body)
			}
		}
	})
}

// A request that arrives at a worker after its deadline is dropped without
// calling the backend.
func TestExpiredRequestIsDropped(t *testing.T) {
	var hits atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer backend.Close()
	g := newGateway(t)
	g.publish(`{"name":"e","pool":"p","route":{"path":"/e"},"backend":{"type":"http","url":"` + backend.URL + `"}}`)
	msg := nats.NewMsg(bus.APISubject("p", "e"))
	msg.Header.Set(bus.HdrDeadline, fmt.Sprint(time.Now().Add(-time.Second).UnixNano()))
	if _, err := g.nc.RequestMsg(msg, 300*time.Millisecond); err != nats.ErrTimeout {
		t.Fatalf("expired request answered: %v", err)
	}
	if hits.Load() != 0 || g.worker.Dropped() != 1 {
		t.Fatalf("backend hits %d, dropped %d", hits.Load(), g.worker.Dropped())
	}
}

// Mock backends answer from the entry; a change to the entry is live at
// once, without a restart, and a deleted API stops routing.
func TestMockAndLiveChanges(t *testing.T) {
	g := newGateway(t)
	g.publish(`{"name":"m","pool":"p","route":{"path":"/m"},"backend":{"type":"mock","status":202,"headers":{"X-Mock":"1"},"json":{"v":1}}}`)
	r := g.do("GET", "/m", nil)
	if r.status != 202 || r.body != `{"v":1}` || r.header.Get("X-Mock") != "1" || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("got %d %q %v", r.status, r.body, r.header)
	}
	g.publish(`{"name":"m","pool":"p","route":{"path":"/m"},"backend":{"type":"mock","body":"v2"}}`)
	if r := g.do("GET", "/m", nil); r.status != 200 || r.body != "v2" {
		t.Fatalf("after update: %d %q", r.status, r.body)
	}
	if err := g.client.Delete(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 2*time.Second, 2*time.Millisecond, func() error {
		if r := g.do("GET", "/m", nil); r.status != 404 {
			return fmt.Errorf("still %d", r.status)
		}
		return nil
	})
}

// Two APIs claiming one route: the first published keeps it, also after
// its own edits. Put refuses the second; written straight into KV, it is
// not routed, nor is an any-method route over the same path.
func TestRouteConflict(t *testing.T) {
	g := newGateway(t, "p")
	g.publish(`{"name":"first","pool":"p","route":{"path":"/r/{id}"},"backend":{"type":"mock","body":"first"}}`)
	second := `{"name":"second","pool":"p","route":{"path":"/r/{other}"},"backend":{"type":"mock","body":"second"}}`
	var rc *registry.RouteConflictError
	if _, err := g.client.Put(context.Background(), []byte(second)); !errors.As(err, &rc) || rc.HeldBy != "first" {
		t.Fatalf("put of a second API on the route: %v", err)
	}
	g.putRaw("second", second)
	g.putRaw("any", `{"name":"any","pool":"p","route":{"method":"*","path":"/r/{x}"},"backend":{"type":"mock","body":"any"}}`)
	g.publish(`{"name":"post","pool":"p","route":{"method":"POST","path":"/r/{x}"},"backend":{"type":"mock","body":"post"}}`)
	for i := range 3 {
		if r := g.do("GET", "/r/1", nil); r.body != "first" {
			t.Fatalf("edit %d: GET got %q", i, r.body)
		}
		if r := g.do("POST", "/r/1", nil); r.body != "post" {
			t.Fatalf("edit %d: POST got %q", i, r.body)
		}
		// Only the timeout changes: a newer revision of the holder.
		g.publish(fmt.Sprintf(`{"name":"first","pool":"p","route":{"path":"/r/{id}"},"backend":{"type":"mock","body":"first"},"timeout":"%ds"}`, i+2))
	}
}

// putRaw writes an entry straight into the bucket, as `nats kv put` would,
// and waits until the edge has it.
func (g *gateway) putRaw(name, doc string) {
	g.t.Helper()
	js, err := jetstream.New(g.nc)
	if err != nil {
		g.t.Fatal(err)
	}
	kv, err := registry.OpenAPIs(context.Background(), js, registry.BucketOptions{})
	if err != nil {
		g.t.Fatal(err)
	}
	rev, err := kv.Put(context.Background(), name, []byte(doc))
	if err != nil {
		g.t.Fatal(err)
	}
	natstest.CheckFor(g.t, 3*time.Second, 2*time.Millisecond, func() error {
		if got := g.edgeW.Current().APIs[name]; got == nil || got.Revision != rev {
			return fmt.Errorf("edge has not applied %s@%d", name, rev)
		}
		return nil
	})
}

// A catch-all route forwards the rest of the path as it was sent.
func TestCatchAll(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.EscapedPath())
	}))
	defer backend.Close()
	g := newGateway(t)
	g.publish(`{"name":"files","pool":"p","route":{"path":"/files/*"},"backend":{"type":"http","url":"` + backend.URL + `/store/{*}"}}`)
	if r := g.do("GET", "/files/a/b%20c/d.txt", nil); r.status != 200 || r.body != "/store/a/b%20c/d.txt" {
		t.Fatalf("got %d %q", r.status, r.body)
	}
}

// Response framing is the edge's business: a chunked backend response
// arrives whole, and nothing is added that the backend did not send.
func TestResponseFraming(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil // no sniffing: the backend sends none
		w.Header().Set("X-Mixed-Case", "kept")
		io.WriteString(w, "part one, ")
		w.(http.Flusher).Flush()
		io.WriteString(w, "part two")
	}))
	defer backend.Close()
	g := newGateway(t)
	g.publish(`{"name":"chunky","pool":"p","route":{"path":"/chunky"},"backend":{"type":"http","url":"` + backend.URL + `"}}`)
	r := g.do("GET", "/chunky", nil)
	if r.status != 200 || r.body != "part one, part two" {
		t.Fatalf("got %d %q", r.status, r.body)
	}
	if ct, ok := r.header["Content-Type"]; ok {
		t.Errorf("Content-Type %q appeared", ct)
	}
	if r.header.Get("X-Mixed-Case") != "kept" || r.header.Get("Server") != "" {
		t.Errorf("headers %v", r.header)
	}
	// HEAD: the backend's Content-Length comes back, no body.
	backend2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1234")
	}))
	defer backend2.Close()
	g.publish(`{"name":"head","pool":"p","route":{"method":"HEAD","path":"/head"},"backend":{"type":"http","url":"` + backend2.URL + `"}}`)
	r = g.do("HEAD", "/head", nil)
	if r.status != 200 || r.header.Get("Content-Length") != "1234" || r.body != "" {
		t.Fatalf("HEAD: %d %v %q", r.status, r.header, r.body)
	}
}

// The backend receives the caller's headers as sent: nothing defaulted in.
func TestRequestHeadersAsSent(t *testing.T) {
	type seenReq struct {
		ct      []string
		ua      string
		host    string
		body    string
		method  string
		cl      int64
		xheader string
	}
	seen := make(chan seenReq, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen <- seenReq{r.Header["Content-Type"], r.UserAgent(), r.Host, string(b), r.Method, r.ContentLength, r.Header.Get("X-Thing")}
	}))
	defer backend.Close()
	g := newGateway(t)
	g.publish(`{"name":"hdr","pool":"p","route":{"method":"*","path":"/hdr"},"backend":{"type":"http","url":"` + backend.URL + `/in"}}`)
	req, _ := http.NewRequest("POST", g.url+"/hdr", strings.NewReader("raw"))
	req.Header.Set("User-Agent", "partner-app/1.0")
	req.Header.Set("X-Thing", "v")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	s := <-seen
	if s.ct != nil || s.ua != "partner-app/1.0" || s.body != "raw" || s.method != "POST" || s.cl != 3 || s.xheader != "v" {
		t.Errorf("backend saw %+v", s)
	}
	if want := strings.TrimPrefix(backend.URL, "http://"); s.host != want {
		t.Errorf("Host %q, want the backend's %q", s.host, want)
	}
}

// A degrade switch makes the edge answer the API itself, without a worker,
// and turning it off restores the API.
func TestDegradeSwitch(t *testing.T) {
	var hits atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "live")
	}))
	defer backend.Close()
	g := newGateway(t, "p")
	g.publish(`{"name":"d","pool":"p","route":{"path":"/d"},"backend":{"type":"http","url":"` + backend.URL + `"}}`)
	ctx := context.Background()
	if _, err := g.client.Put(ctx, []byte(`{"name":"orphan","pool":"nobody","route":{"path":"/orphan"},"backend":{"type":"mock"}}`)); err != nil {
		t.Fatal(err)
	}
	flip := func(api string, d *registry.Degrade) {
		t.Helper()
		var rev uint64
		if d == nil {
			if err := g.client.ClearDegrade(ctx, api); err != nil {
				t.Fatal(err)
			}
		} else {
			set, err := g.client.SetDegrade(ctx, api, d)
			if err != nil {
				t.Fatal(err)
			}
			rev = set.Revision
		}
		natstest.CheckFor(t, time.Second, 2*time.Millisecond, func() error {
			cur := g.edgeW.Current().Degrade[api]
			if on := d != nil && d.On; (cur != nil) != on || on && cur.Revision != rev {
				return fmt.Errorf("switch of %s not applied", api)
			}
			return nil
		})
	}
	flip("d", &registry.Degrade{On: true, Reason: "maintenance"})
	r := g.do("GET", "/d", nil)
	if r.status != 503 || r.code != "DEGRADED" || !strings.Contains(r.body, "maintenance") || hits.Load() != 0 {
		t.Fatalf("default degrade: %d %s (backend hits %d)", r.status, r.body, hits.Load())
	}
	body := `{"items":[]}`
	flip("d", &registry.Degrade{On: true, Static: registry.Static{Status: 200, Headers: map[string]string{"X-Degraded": "1"}, Body: &body}})
	r = g.do("GET", "/d", nil)
	if r.status != 200 || r.body != body || r.header.Get("X-Degraded") != "1" || hits.Load() != 0 {
		t.Fatalf("custom degrade: %d %q %v", r.status, r.body, r.header)
	}
	// No worker needed: an API whose pool has none still answers degraded.
	flip("orphan", &registry.Degrade{On: true})
	if r := g.do("GET", "/orphan", nil); r.status != 503 || r.code != "DEGRADED" {
		t.Fatalf("orphan: %d %s", r.status, r.body)
	}
	flip("d", &registry.Degrade{On: false})
	if r := g.do("GET", "/d", nil); r.status != 200 || r.body != "live" {
		t.Fatalf("switch off: %d %q", r.status, r.body)
	}
	flip("orphan", nil)
	if r := g.do("GET", "/orphan", nil); r.code != "NO_WORKERS" {
		t.Fatalf("switch deleted: %d %s", r.status, r.body)
	}
}

// A degrade switch with "cached" answers from the last good responses the
// edge saw, without a worker; requests it never saw get the switch's answer.
func TestDegradeCached(t *testing.T) {
	var hits atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"q":%q}`, r.URL.RawQuery)
	}))
	defer backend.Close()
	g := newGateway(t)
	g.publish(`{"name":"dc","pool":"p","route":{"path":"/dc"},"backend":{"type":"http","url":"` + backend.URL + `"},"fallback":{"cached":true}}`)
	if r := g.do("GET", "/dc?x=1", nil); r.status != 200 || r.body != `{"q":"x=1"}` {
		t.Fatalf("live: %d %q", r.status, r.body)
	}
	set, err := g.client.SetDegrade(context.Background(), "dc", &registry.Degrade{On: true, Cached: true, Reason: "backend down"})
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, time.Second, 2*time.Millisecond, func() error {
		if d := g.edgeW.Current().Degrade["dc"]; d == nil || d.Revision != set.Revision {
			return fmt.Errorf("switch not applied")
		}
		return nil
	})
	before := hits.Load()
	r := g.do("GET", "/dc?x=1", nil, "X-Request-Id", "fresh-id")
	if r.status != 200 || r.body != `{"q":"x=1"}` || r.header.Get("X-Jetway-Degraded") != "cached" ||
		r.header.Get("Content-Type") != "application/json" || r.header.Get("X-Request-Id") != "fresh-id" {
		t.Fatalf("cached degrade: %d %q %v", r.status, r.body, r.header)
	}
	if r := g.do("GET", "/dc?x=2", nil); r.status != 503 || r.code != "DEGRADED" {
		t.Fatalf("never seen request: %d %s", r.status, r.body)
	}
	if hits.Load() != before {
		t.Fatal("the backend was called while the API was degraded")
	}
}
