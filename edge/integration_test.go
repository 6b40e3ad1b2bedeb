package edge_test

import (
	"context"
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

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

// gateway is the shared harness (internal/jetwaytest: an edge and a
// worker over a real nats-server, as in `jetway serve`) with the edge
// tests' own helpers as methods.
type gateway struct{ *jetwaytest.Gateway }

func newGateway(t *testing.T, pools ...string) *gateway {
	t.Helper()
	return newGatewayWith(t, edge.Options{}, pools...)
}

// newGatewayWith is newGateway with edge options (connection and metrics
// are filled in).
func newGatewayWith(t *testing.T, eo edge.Options, pools ...string) *gateway {
	t.Helper()
	return &gateway{jetwaytest.StartWith(t, jetwaytest.Options{Edge: eo, Worker: workers.Options{Pools: pools}})}
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
	g.Publish(`{"name":"orders.update","pool":"orders","route":{"method":"PUT","path":"/v1/orders/{id}/items/{item}"},
		"backend":{"type":"http","url":"` + backend.URL + `/o/{id}/i/{item}?src=gw"}}`)

	r := g.Do("PUT", "/v1/orders/a%20b/items/7?x=1&y=%2F", strings.NewReader(`{"qty":2}`),
		"Content-Type", "application/json", "X-Custom", "c", "Connection", "X-Hop", "X-Hop", "secret",
		"Jetway-App", "forged", "X-Forwarded-For", "6.6.6.6", "X-Request-Id", "req-123")
	if r.Status != 201 || r.Body != "got PUT /o/a%20b/i/7?src=gw&x=1&y=%2F" {
		t.Fatalf("got %d %q", r.Status, r.Body)
	}
	if r.Header.Get("X-Backend") != "yes" || len(r.Header.Values("Set-Cookie")) != 2 || r.Header.Get("Jetway-Status") != "" {
		t.Errorf("response headers %v", r.Header)
	}
	if r.Header.Get("X-Request-Id") != "req-123" {
		t.Errorf("request id not kept: %v", r.Header.Get("X-Request-Id"))
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
	g.Publish(`{"name":"b","pool":"p","route":{"path":"/b"},"backend":{"type":"http","url":"` + backend.URL + `"}}`)
	r := g.Do("GET", "/b", nil)
	if r.Status != 503 || r.Body != "backend says no" || r.Code != "" || r.Header.Get("Content-Type") != "text/plain" {
		t.Fatalf("got %d %q code=%q", r.Status, r.Body, r.Code)
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
	g.Publish(`{"name":"small","pool":"main","route":{"method":"POST","path":"/small"},"max_body":"1KiB",
		"backend":{"type":"http","url":"` + backend.URL + `/small"}}`)
	g.Publish(`{"name":"hang","pool":"main","route":{"path":"/hang"},"timeout":"2s","concurrency":2,
		"backend":{"type":"http","url":"` + backend.URL + `/hang"}}`)
	g.Publish(`{"name":"down","pool":"main","route":{"path":"/down"},"backend":{"type":"http","url":"http://127.0.0.1:1/x"}}`)
	// An API of a pool no worker serves.
	a, err := g.Client.Put(context.Background(), []byte(`{"name":"orphan","pool":"nobody","route":{"path":"/orphan"},"timeout":"5s","backend":{"type":"mock"}}`))
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 3*time.Second, 2*time.Millisecond, func() error {
		if g.EdgeWatcher.Current().APIs["orphan"] == nil || g.EdgeWatcher.Current().Revision < a.Revision {
			return fmt.Errorf("orphan not applied")
		}
		return nil
	})

	t.Run("route not found", func(t *testing.T) {
		r := g.Do("GET", "/nope", nil)
		if r.Status != 404 || r.Code != "ROUTE_NOT_FOUND" || !strings.Contains(r.Body, `"request_id":"`) {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
	})
	t.Run("method not allowed", func(t *testing.T) {
		if r := g.Do("GET", "/small", nil); r.Status != 405 || r.Code != "METHOD_NOT_ALLOWED" {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
	})
	t.Run("path not canonical", func(t *testing.T) {
		if r := g.Do("GET", "/hang/%2e%2e/small", nil); r.Status != 400 || r.Code != "BAD_REQUEST" {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
	})
	t.Run("body too large", func(t *testing.T) {
		before := hits.Load()
		if r := g.Do("POST", "/small", strings.NewReader(strings.Repeat("x", 2048))); r.Status != 413 || r.Code != "PAYLOAD_TOO_LARGE" {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
		// Without a Content-Length (chunked), the limit holds too.
		if r := g.Do("POST", "/small", io.MultiReader(strings.NewReader(strings.Repeat("x", 2048)))); r.Status != 413 {
			t.Fatalf("chunked: got %d %s", r.Status, r.Body)
		}
		if hits.Load() != before {
			t.Fatal("the backend saw a request over the limit")
		}
		if r := g.Do("POST", "/small", strings.NewReader(strings.Repeat("x", 1024))); r.Status != 200 {
			t.Fatalf("at the limit: got %d %s", r.Status, r.Body)
		}
	})
	t.Run("no workers", func(t *testing.T) {
		start := time.Now()
		r := g.Do("GET", "/orphan", nil)
		if r.Status != 503 || r.Code != "NO_WORKERS" {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("NO_WORKERS took %v: it must not wait for the 5s timeout", d)
		}
	})
	t.Run("backend unreachable", func(t *testing.T) {
		r := g.Do("GET", "/down", nil)
		if r.Status != 502 || r.Code != "BAD_GATEWAY" || strings.Contains(r.Body, "127.0.0.1:1") {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
	})
	t.Run("timeout and overload", func(t *testing.T) {
		var wg sync.WaitGroup
		results := make([]jetwaytest.Result, 2)
		for i := range results {
			wg.Add(1)
			go func() { defer wg.Done(); results[i] = g.Do("GET", "/hang", nil) }()
		}
		// Both slots are taken once the worker reports them in flight;
		// the third call must reach the worker before their 2 s timeout.
		natstest.CheckFor(t, 1500*time.Millisecond, time.Millisecond, func() error {
			if n := g.Worker.InFlight(); n != 2 {
				return fmt.Errorf("in flight %d", n)
			}
			return nil
		})
		r := g.Do("GET", "/hang", nil)
		wg.Wait()
		if r.Status != 503 || r.Code != "OVERLOADED" {
			t.Errorf("third call: got %d %s", r.Status, r.Body)
		}
		for _, r := range results {
			if r.Status != 504 || r.Code != "GATEWAY_TIMEOUT" {
				t.Errorf("hung call: got %d %s", r.Status, r.Body)
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
	g.Publish(`{"name":"e","pool":"p","route":{"path":"/e"},"backend":{"type":"http","url":"` + backend.URL + `"}}`)
	msg := nats.NewMsg(bus.APISubject("p", "e"))
	msg.Header.Set(bus.HdrDeadline, fmt.Sprint(time.Now().Add(-time.Second).UnixNano()))
	if _, err := g.Conn.RequestMsg(msg, 300*time.Millisecond); err != nats.ErrTimeout {
		t.Fatalf("expired request answered: %v", err)
	}
	natstest.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if n := g.Worker.Dropped(); n != 1 {
			return fmt.Errorf("dropped %d", n)
		}
		return nil
	})
	if hits.Load() != 0 {
		t.Fatalf("backend hits %d", hits.Load())
	}
}

// Mock backends answer from the entry; a change to the entry is live at
// once, without a restart, and a deleted API stops routing.
func TestMockAndLiveChanges(t *testing.T) {
	g := newGateway(t)
	g.Publish(`{"name":"m","pool":"p","route":{"path":"/m"},"backend":{"type":"mock","status":202,"headers":{"X-Mock":"1"},"json":{"v":1}}}`)
	r := g.Do("GET", "/m", nil)
	if r.Status != 202 || r.Body != `{"v":1}` || r.Header.Get("X-Mock") != "1" || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("got %d %q %v", r.Status, r.Body, r.Header)
	}
	g.Publish(`{"name":"m","pool":"p","route":{"path":"/m"},"backend":{"type":"mock","body":"v2"}}`)
	if r := g.Do("GET", "/m", nil); r.Status != 200 || r.Body != "v2" {
		t.Fatalf("after update: %d %q", r.Status, r.Body)
	}
	if err := g.Client.Delete(context.Background(), "m"); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 2*time.Second, 2*time.Millisecond, func() error {
		if r := g.Do("GET", "/m", nil); r.Status != 404 {
			return fmt.Errorf("still %d", r.Status)
		}
		return nil
	})
}

// Two APIs claiming one route: the first published keeps it, also after
// its own edits. Put refuses the second; written straight into KV, it is
// not routed, nor is an any-method route over the same path.
func TestRouteConflict(t *testing.T) {
	g := newGateway(t, "p")
	g.Publish(`{"name":"first","pool":"p","route":{"path":"/r/{id}"},"backend":{"type":"mock","body":"first"}}`)
	second := `{"name":"second","pool":"p","route":{"path":"/r/{other}"},"backend":{"type":"mock","body":"second"}}`
	var rc *registry.RouteConflictError
	if _, err := g.Client.Put(context.Background(), []byte(second)); !errors.As(err, &rc) || rc.HeldBy != "first" {
		t.Fatalf("put of a second API on the route: %v", err)
	}
	g.PutRaw("second", second)
	g.PutRaw("any", `{"name":"any","pool":"p","route":{"method":"*","path":"/r/{x}"},"backend":{"type":"mock","body":"any"}}`)
	g.Publish(`{"name":"post","pool":"p","route":{"method":"POST","path":"/r/{x}"},"backend":{"type":"mock","body":"post"}}`)
	for i := range 3 {
		if r := g.Do("GET", "/r/1", nil); r.Body != "first" {
			t.Fatalf("edit %d: GET got %q", i, r.Body)
		}
		if r := g.Do("POST", "/r/1", nil); r.Body != "post" {
			t.Fatalf("edit %d: POST got %q", i, r.Body)
		}
		// Only the timeout changes: a newer revision of the holder.
		g.Publish(fmt.Sprintf(`{"name":"first","pool":"p","route":{"path":"/r/{id}"},"backend":{"type":"mock","body":"first"},"timeout":"%ds"}`, i+2))
	}
}

// A catch-all route forwards the rest of the path as it was sent.
func TestCatchAll(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.EscapedPath())
	}))
	defer backend.Close()
	g := newGateway(t)
	g.Publish(`{"name":"files","pool":"p","route":{"path":"/files/*"},"backend":{"type":"http","url":"` + backend.URL + `/store/{*}"}}`)
	if r := g.Do("GET", "/files/a/b%20c/d.txt", nil); r.Status != 200 || r.Body != "/store/a/b%20c/d.txt" {
		t.Fatalf("got %d %q", r.Status, r.Body)
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
	g.Publish(`{"name":"chunky","pool":"p","route":{"path":"/chunky"},"backend":{"type":"http","url":"` + backend.URL + `"}}`)
	r := g.Do("GET", "/chunky", nil)
	if r.Status != 200 || r.Body != "part one, part two" {
		t.Fatalf("got %d %q", r.Status, r.Body)
	}
	if ct, ok := r.Header["Content-Type"]; ok {
		t.Errorf("Content-Type %q appeared", ct)
	}
	if r.Header.Get("X-Mixed-Case") != "kept" || r.Header.Get("Server") != "" {
		t.Errorf("headers %v", r.Header)
	}
	// HEAD: the backend's Content-Length comes back, no body.
	backend2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1234")
	}))
	defer backend2.Close()
	g.Publish(`{"name":"head","pool":"p","route":{"method":"HEAD","path":"/head"},"backend":{"type":"http","url":"` + backend2.URL + `"}}`)
	r = g.Do("HEAD", "/head", nil)
	if r.Status != 200 || r.Header.Get("Content-Length") != "1234" || r.Body != "" {
		t.Fatalf("HEAD: %d %v %q", r.Status, r.Header, r.Body)
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
	g.Publish(`{"name":"hdr","pool":"p","route":{"method":"*","path":"/hdr"},"backend":{"type":"http","url":"` + backend.URL + `/in"}}`)
	req, _ := http.NewRequest("POST", g.URL+"/hdr", strings.NewReader("raw"))
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
	g.Publish(`{"name":"d","pool":"p","route":{"path":"/d"},"backend":{"type":"http","url":"` + backend.URL + `"}}`)
	ctx := context.Background()
	orphan, err := g.Client.Put(ctx, []byte(`{"name":"orphan","pool":"nobody","route":{"path":"/orphan"},"backend":{"type":"mock"}}`))
	if err != nil {
		t.Fatal(err)
	}
	// The switches and the APIs are watched apart: wait for the API too,
	// or a switch may be in force before the route it answers for.
	natstest.CheckFor(t, 3*time.Second, 2*time.Millisecond, func() error {
		if a := g.EdgeWatcher.Current().APIs["orphan"]; a == nil || a.Revision < orphan.Revision {
			return fmt.Errorf("orphan not applied")
		}
		return nil
	})
	flip := func(api string, d *registry.Degrade) {
		t.Helper()
		var rev uint64
		if d == nil {
			if err := g.Client.ClearDegrade(ctx, api); err != nil {
				t.Fatal(err)
			}
		} else {
			set, err := g.Client.SetDegrade(ctx, api, d)
			if err != nil {
				t.Fatal(err)
			}
			rev = set.Revision
		}
		natstest.CheckFor(t, jetwaytest.Wait, 2*time.Millisecond, func() error {
			cur := g.EdgeWatcher.Current().Degrade[api]
			if on := d != nil && d.On; (cur != nil) != on || on && cur.Revision != rev {
				return fmt.Errorf("switch of %s not applied", api)
			}
			return nil
		})
	}
	flip("d", &registry.Degrade{On: true, Reason: "maintenance"})
	r := g.Do("GET", "/d", nil)
	if r.Status != 503 || r.Code != "DEGRADED" || !strings.Contains(r.Body, "maintenance") || hits.Load() != 0 {
		t.Fatalf("default degrade: %d %s (backend hits %d)", r.Status, r.Body, hits.Load())
	}
	body := `{"items":[]}`
	flip("d", &registry.Degrade{On: true, Static: registry.Static{Status: 200, Headers: map[string]string{"X-Degraded": "1"}, Body: &body}})
	r = g.Do("GET", "/d", nil)
	if r.Status != 200 || r.Body != body || r.Header.Get("X-Degraded") != "1" || hits.Load() != 0 {
		t.Fatalf("custom degrade: %d %q %v", r.Status, r.Body, r.Header)
	}
	// No worker needed: an API whose pool has none still answers degraded.
	flip("orphan", &registry.Degrade{On: true})
	if r := g.Do("GET", "/orphan", nil); r.Status != 503 || r.Code != "DEGRADED" {
		t.Fatalf("orphan: %d %s", r.Status, r.Body)
	}
	flip("d", &registry.Degrade{On: false})
	if r := g.Do("GET", "/d", nil); r.Status != 200 || r.Body != "live" {
		t.Fatalf("switch off: %d %q", r.Status, r.Body)
	}
	flip("orphan", nil)
	if r := g.Do("GET", "/orphan", nil); r.Code != "NO_WORKERS" {
		t.Fatalf("switch deleted: %d %s", r.Status, r.Body)
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
	g.Publish(`{"name":"dc","pool":"p","route":{"path":"/dc"},"backend":{"type":"http","url":"` + backend.URL + `"},"fallback":{"cached":true}}`)
	if r := g.Do("GET", "/dc?x=1", nil); r.Status != 200 || r.Body != `{"q":"x=1"}` {
		t.Fatalf("live: %d %q", r.Status, r.Body)
	}
	set, err := g.Client.SetDegrade(context.Background(), "dc", &registry.Degrade{On: true, Cached: true, Reason: "backend down"})
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, jetwaytest.Wait, 2*time.Millisecond, func() error {
		if d := g.EdgeWatcher.Current().Degrade["dc"]; d == nil || d.Revision != set.Revision {
			return fmt.Errorf("switch not applied")
		}
		return nil
	})
	before := hits.Load()
	r := g.Do("GET", "/dc?x=1", nil, "X-Request-Id", "fresh-id")
	if r.Status != 200 || r.Body != `{"q":"x=1"}` || r.Header.Get("X-Jetway-Degraded") != "cached" ||
		r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Request-Id") != "fresh-id" {
		t.Fatalf("cached degrade: %d %q %v", r.Status, r.Body, r.Header)
	}
	if r := g.Do("GET", "/dc?x=2", nil); r.Status != 503 || r.Code != "DEGRADED" {
		t.Fatalf("never seen request: %d %s", r.Status, r.Body)
	}
	if hits.Load() != before {
		t.Fatal("the backend was called while the API was degraded")
	}
}
