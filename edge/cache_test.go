package edge_test

import (
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// cacheBackend answers with what it saw: a version it counts, the query,
// the headers a poisoner would use, the app; ?cc= sets its Cache-Control,
// ?cookie a Set-Cookie, and fail makes it answer 500.
type cacheBackend struct {
	*httptest.Server
	calls   atomic.Int64
	version atomic.Int64
	fail    atomic.Bool
	mu      sync.Mutex
	seen    []http.Header
}

func newCacheBackend(t *testing.T) *cacheBackend {
	b := &cacheBackend{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.calls.Add(1)
		b.mu.Lock()
		b.seen = append(b.seen, r.Header.Clone())
		b.mu.Unlock()
		if b.fail.Load() {
			w.WriteHeader(500)
			return
		}
		q := r.URL.Query()
		if cc := q.Get("cc"); cc != "" {
			w.Header().Set("Cache-Control", cc)
		}
		if q.Has("cookie") {
			w.Header().Set("Set-Cookie", "session=secret")
		}
		fmt.Fprintf(w, "v%d q=%s evil=%s lang=%s app=%s ip=%s", b.version.Load(), r.URL.RawQuery,
			r.Header.Get("X-Evil"), r.Header.Get("Accept-Language"), r.Header.Get("X-Jetway-App"), r.Header.Get("X-Real-Ip"))
	}))
	t.Cleanup(b.Close)
	return b
}

// The response cache: a repeated call is a hit that never reaches the
// backend; what is keyed tells answers apart; nothing unkeyed reaches the
// backend, so no caller can poison what others get; Cache-Control,
// Set-Cookie and the statuses decide what is kept.
func TestResponseCache(t *testing.T) {
	be := newCacheBackend(t)
	g := newGateway(t)
	g.Publish(`{"name":"catalog","pool":"p","route":{"path":"/catalog/{id}"},"backend":{"type":"http","url":"` + be.URL + `/c/{id}"},
		"cache":{"ttl":"1m","key":{"headers":["Accept-Language"]}}}`)
	get := func(path string, hdr ...string) jetwaytest.Result { return g.Do("GET", path, nil, hdr...) }

	t.Run("hit and miss", func(t *testing.T) {
		before := be.calls.Load()
		r := get("/catalog/1?a=1")
		if r.Status != 200 || r.Header.Get("X-Cache") != "miss" {
			t.Fatalf("first call: %d %q %s", r.Status, r.Header.Get("X-Cache"), r.Body)
		}
		for range 5 {
			h := get("/catalog/1?a=1")
			if h.Header.Get("X-Cache") != "hit" || h.Body != r.Body || h.Header.Get("Age") == "" || h.Header.Get("X-Request-Id") == r.Header.Get("X-Request-Id") {
				t.Fatalf("repeat: %q %q age %q", h.Header.Get("X-Cache"), h.Body, h.Header.Get("Age"))
			}
		}
		if n := be.calls.Load() - before; n != 1 {
			t.Fatalf("backend called %d times for one key", n)
		}
		for _, p := range []string{"/catalog/1?a=2", "/catalog/2?a=1", "/catalog/1"} {
			if x := get(p).Header.Get("X-Cache"); x != "miss" {
				t.Errorf("%s: %q", p, x)
			}
		}
		if x := get("/catalog/1?a=1", "Accept-Language", "fr").Header.Get("X-Cache"); x != "miss" {
			t.Errorf("another keyed header value: %q", x)
		}
		if r := get("/catalog/1?a=1", "Accept-Language", "fr"); r.Header.Get("X-Cache") != "hit" || !strings.Contains(r.Body, "lang=fr") {
			t.Errorf("keyed header: %q %s", r.Header.Get("X-Cache"), r.Body)
		}
	})
	t.Run("no unkeyed input reaches the backend", func(t *testing.T) {
		// A poisoner's header would be reflected into the answer everyone
		// gets, were it sent: it is not, nor the client's address.
		r := get("/catalog/poison", "X-Evil", "<script>", "Cookie", "a=b", "Authorization", "Bearer x")
		if strings.Contains(r.Body, "<script>") || strings.Contains(r.Body, "ip=1") {
			t.Fatalf("an unkeyed header reached the backend: %s", r.Body)
		}
		be.mu.Lock()
		last := be.seen[len(be.seen)-1]
		be.mu.Unlock()
		for _, h := range []string{"X-Evil", "Cookie", "Authorization", "X-Forwarded-For", "X-Real-Ip"} {
			if last.Get(h) != "" {
				t.Errorf("the backend of a cached call got %s: %q", h, last.Get(h))
			}
		}
		if r2 := get("/catalog/poison"); r2.Body != r.Body || r2.Header.Get("X-Cache") != "hit" {
			t.Fatalf("%q %s", r2.Header.Get("X-Cache"), r2.Body)
		}
	})
	t.Run("what is not kept", func(t *testing.T) {
		for _, q := range []string{"cc=no-store", "cc=private", "cc=no-cache", "cc=max-age%3Dx", "cookie"} {
			get("/catalog/k?" + q)
			if x := get("/catalog/k?" + q).Header.Get("X-Cache"); x != "miss" {
				t.Errorf("%s was kept: %q", q, x)
			}
		}
		// max-age sets the freshness: 1 s, then a miss.
		get("/catalog/k?cc=max-age%3D1")
		if x := get("/catalog/k?cc=max-age%3D1").Header.Get("X-Cache"); x != "hit" {
			t.Fatalf("max-age=1, at once: %q", x)
		}
		time.Sleep(1100 * time.Millisecond)
		if x := get("/catalog/k?cc=max-age%3D1").Header.Get("X-Cache"); x != "miss" {
			t.Fatalf("max-age=1, after 1.1 s: %q", x)
		}
		// A call with a body is never cached (the body is not keyed).
		if r := g.Do("GET", "/catalog/b", strings.NewReader("x")); r.Header.Get("X-Cache") != "" {
			t.Errorf("a GET with a body: %q", r.Header.Get("X-Cache"))
		}
	})
}

// Stale answers: while one call refreshes it in the background, and when
// the backend fails; apps are keyed on an API that authenticates.
func TestResponseCacheStale(t *testing.T) {
	be := newCacheBackend(t)
	g := newGateway(t)
	g.Publish(`{"name":"prices","pool":"p","route":{"path":"/prices"},"backend":{"type":"http","url":"` + be.URL + `/p"},
		"auth":{"methods":["key"]},"cache":{"ttl":"200ms","stale_while_revalidate":"1s","stale_if_error":"1h"}}`)
	one, two := g.PutKeyedApp("one"), g.PutKeyedApp("two")
	get := func(key string) jetwaytest.Result { return g.Do("GET", "/prices", nil, "X-Api-Key", key) }

	if r := get(one); !strings.Contains(r.Body, "v0") || !strings.Contains(r.Body, "app=one") {
		t.Fatalf("%s", r.Body)
	}
	if r := get(two); r.Header.Get("X-Cache") != "miss" || !strings.Contains(r.Body, "app=two") {
		t.Fatalf("another app shares the answer: %q %s", r.Header.Get("X-Cache"), r.Body)
	}
	be.version.Store(1)
	time.Sleep(250 * time.Millisecond) // stale, within stale-while-revalidate
	before := be.calls.Load()
	r := get(one)
	if r.Header.Get("X-Cache") != "stale" || !strings.Contains(r.Body, "v0") {
		t.Fatalf("stale-while-revalidate: %q %s", r.Header.Get("X-Cache"), r.Body)
	}
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if r := get(one); !strings.Contains(r.Body, "v1") || r.Header.Get("X-Cache") != "hit" {
			return fmt.Errorf("not refreshed: %q %s", r.Header.Get("X-Cache"), r.Body)
		}
		return nil
	})
	if n := be.calls.Load() - before; n != 1 {
		t.Errorf("the refresh took %d backend calls", n)
	}
	be.fail.Store(true)
	time.Sleep(1300 * time.Millisecond) // past stale-while-revalidate
	if r := get(one); r.Status != 200 || r.Header.Get("X-Cache") != "stale" || !strings.Contains(r.Body, "v1") {
		t.Fatalf("stale-if-error: %d %q %s", r.Status, r.Header.Get("X-Cache"), r.Body)
	}
}

// jetway cache purge's request reaches every edge, each drops the API's
// answers (all, or one path's) and says how many.
func TestResponseCachePurgeOnEveryEdge(t *testing.T) {
	be := newCacheBackend(t)
	g := newGateway(t)
	second, _, _ := g.AddEdge(t, edge.Options{})
	g.Publish(`{"name":"docs","pool":"p","route":{"path":"/docs/{id}"},"backend":{"type":"http","url":"` + be.URL + `/d/{id}"},
		"cache":{"ttl":"1h"}}`)
	natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
		if r := jetwaytest.Do(t, second, "GET", "/docs/1", nil); r.Status != 200 {
			return fmt.Errorf("second edge: %d", r.Status)
		}
		return nil
	})
	for _, base := range []string{g.URL, second} {
		for _, p := range []string{"/docs/1", "/docs/2", "/docs/1?x=1"} {
			jetwaytest.Do(t, base, "GET", p, nil)
		}
	}
	purge := func(doc string) (edges, purged int) {
		inbox := nats.NewInbox()
		sub, err := g.Conn.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := g.Conn.PublishRequest(bus.CachePurgeSubject, inbox, []byte(doc)); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := sub.NextMsg(500 * time.Millisecond)
			if err != nil {
				return edges, purged
			}
			var r struct{ Purged int }
			_ = json.Unmarshal(m.Data, &r)
			edges, purged = edges+1, purged+r.Purged
		}
	}
	if e, n := purge(`{"api":"docs","path":"/docs/1"}`); e != 2 || n != 4 {
		t.Fatalf("purge of a path: %d edges, %d answers", e, n)
	}
	for _, base := range []string{g.URL, second} {
		if x := jetwaytest.Do(t, base, "GET", "/docs/1", nil).Header.Get("X-Cache"); x != "miss" {
			t.Errorf("%s /docs/1 after purge: %q", base, x)
		}
		if x := jetwaytest.Do(t, base, "GET", "/docs/2", nil).Header.Get("X-Cache"); x != "hit" {
			t.Errorf("%s /docs/2 after a purge of /docs/1: %q", base, x)
		}
	}
	if e, n := purge(`{"api":"docs"}`); e != 2 || n != 4 {
		t.Fatalf("purge of all: %d edges, %d answers", e, n)
	}
}

// Regressions of the cache review: a host variant cannot poison the
// answer of the canonical host; a fallback's answer is never kept and
// stale-if-error beats it; key.query [] keys (and sends) no parameter;
// the refresh has its own deadline; a purge takes any spelling of a path;
// a new backend starts the cache afresh.
func TestResponseCacheReview(t *testing.T) {
	var fail atomic.Bool
	var calls atomic.Int64
	var lastQuery atomic.Value
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		lastQuery.Store(r.URL.RawQuery)
		if fail.Load() {
			w.WriteHeader(500)
			return
		}
		fmt.Fprintf(w, "host=%s path=%s n=%d", r.Header.Get("X-Forwarded-Host"), r.URL.Path, calls.Load())
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	doHost := func(host, path string, hdr ...string) (http.Header, string) {
		req, _ := http.NewRequest("GET", g.URL+path, nil)
		req.Host = host
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := jetwaytest.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Header, string(b)
	}

	g.Publish(`{"name":"h","pool":"p","route":{"path":"/h/{id}"},"backend":{"type":"http","url":"` + be.URL + `/h/{id}"},"timeout":"2s",
		"fallback":{"static":{"status":200,"body":"sorry"}},
		"cache":{"ttl":"200ms","stale_while_revalidate":"1s","stale_if_error":"1h","key":{"query":[]}}}`)
	if _, body := doHost("Shop.Example:6666.", "/h/1"); !strings.Contains(body, "host=shop.example ") {
		t.Fatalf("the backend of a cached call got the caller's spelling of the host: %s", body)
	}
	if _, body := doHost("shop.example", "/h/1"); !strings.Contains(body, "host=shop.example ") {
		t.Fatalf("victim: %s", body)
	}
	doHost("shop.example", "/h/2?secret=1&x=2")
	if q := lastQuery.Load().(string); q != "" {
		t.Fatalf("key.query [] sent the query %q", q)
	}

	// The refresh of a stale answer is not the stale caller's: its 1 ms
	// X-Request-Timeout does not make the refresh expire.
	time.Sleep(250 * time.Millisecond)
	if h, _ := doHost("shop.example", "/h/1", "X-Request-Timeout", "1ms"); h.Get("X-Cache") != "stale" {
		t.Fatalf("want a stale answer, got %q", h.Get("X-Cache"))
	}
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if h, _ := doHost("shop.example", "/h/1"); h.Get("X-Cache") != "hit" {
			return fmt.Errorf("the refresh did not land: %q", h.Get("X-Cache"))
		}
		return nil
	})

	// The backend fails: the stale answer beats the static fallback, and
	// the fallback's answer is never kept.
	fail.Store(true)
	time.Sleep(1300 * time.Millisecond) // past stale-while-revalidate
	if h, body := doHost("shop.example", "/h/1"); h.Get("X-Cache") != "stale" || body == "sorry" {
		t.Fatalf("stale-if-error against a fallback: %q %s", h.Get("X-Cache"), body)
	}
	if _, body := doHost("shop.example", "/h/new"); body != "sorry" {
		t.Fatalf("no stale answer: want the fallback, got %s", body)
	}
	fail.Store(false)
	if h, body := doHost("shop.example", "/h/new"); h.Get("X-Cache") != "miss" || body == "sorry" {
		t.Fatalf("after recovery the fallback's answer was served: %q %s", h.Get("X-Cache"), body)
	}

	// A purge by path takes any spelling of it.
	doHost("shop.example", "/h/caf%c3%a9")
	m, err := g.Conn.Request(bus.CachePurgeSubject, []byte(`{"api":"h","path":"/h/caf%c3%a9"}`), 2*time.Second)
	if err != nil || !strings.Contains(string(m.Data), `"purged":1`) {
		t.Fatalf("purge of a lower-case escape: %v %s", err, m.Data)
	}

	// A new backend: the old one's answers go.
	doHost("shop.example", "/h/kept")
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "new backend") }))
	t.Cleanup(other.Close)
	g.Publish(`{"name":"h","pool":"p","route":{"path":"/h/{id}"},"backend":{"type":"http","url":"` + other.URL + `"},"timeout":"2s",
		"cache":{"ttl":"200ms","stale_while_revalidate":"1s","stale_if_error":"1h","key":{"query":[]}}}`)
	if _, body := doHost("shop.example", "/h/kept"); body != "new backend" {
		t.Fatalf("after a new backend: %s", body)
	}
}

// Concurrent misses on one key collapse: one call reaches the backend and
// the others get its answer; an answer the cache may not keep sends each
// waiting call on its own way, and a failure lets them fall back to a
// stale answer without calling the failing backend again.
func TestResponseCacheCollapsesMisses(t *testing.T) {
	var calls atomic.Int64
	var fail atomic.Bool
	release := make(chan struct{})
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		<-release
		if fail.Load() {
			w.WriteHeader(500)
			return
		}
		if r.URL.Query().Has("private") {
			w.Header().Set("Cache-Control", "private")
		}
		fmt.Fprintf(w, "call %d", n)
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	g.Publish(`{"name":"burst","pool":"p","route":{"path":"/burst"},"backend":{"type":"http","url":"` + be.URL + `/b"},"timeout":"5s",
		"cache":{"ttl":"1s","stale_if_error":"1m"}}`)

	burst := func(path string, n int) []jetwaytest.Result {
		out := make([]jetwaytest.Result, n)
		var wg sync.WaitGroup
		for i := range out {
			wg.Go(func() { out[i] = g.Do("GET", path, nil) })
		}
		deadline := time.Now().Add(3 * time.Second)
		for calls.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		natstest.CheckFor(t, 5*time.Second, time.Millisecond, func() error { // the others arrive and wait
			if f := g.Edge.InFlight(); f != int64(n) {
				return fmt.Errorf("%d of %d calls at the edge", f, n)
			}
			return nil
		})
		stop := make(chan struct{})
		go func() { // the first call, and any further ones, go through
			for {
				select {
				case release <- struct{}{}:
				case <-stop:
					return
				}
			}
		}()
		wg.Wait()
		close(stop)
		return out
	}

	rs := burst("/burst", 20)
	kept := time.Now()
	if n := calls.Load(); n != 1 {
		t.Fatalf("20 concurrent misses made %d backend calls, want 1", n)
	}
	xc := map[string]int{}
	for _, r := range rs {
		if r.Status != 200 || r.Body != "call 1" {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		xc[r.Header.Get("X-Cache")]++
	}
	if xc["miss"] != 1 || xc["hit"] != 19 {
		t.Errorf("X-Cache: %v", xc)
	}

	// Not keepable: every call gets an answer of its own.
	calls.Store(0)
	for _, r := range burst("/burst?private", 5) {
		if r.Status != 200 || r.Header.Get("X-Cache") != "miss" {
			t.Fatalf("%d %s %s", r.Status, r.Header.Get("X-Cache"), r.Body)
		}
	}
	if n := calls.Load(); n != 5 {
		t.Errorf("5 calls whose answer may not be kept made %d backend calls", n)
	}

	// A failure: the one call that reached the backend fails, and all fall
	// back to the stale answer of the first burst.
	calls.Store(0)
	fail.Store(true)
	time.Sleep(time.Until(kept.Add(1100 * time.Millisecond))) // the kept answer is stale now
	for _, r := range burst("/burst", 10) {
		if r.Status != 200 || r.Header.Get("X-Cache") != "stale" || r.Body != "call 1" {
			t.Fatalf("%d %s %s", r.Status, r.Header.Get("X-Cache"), r.Body)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("10 misses on a failing backend made %d calls, want 1", n)
	}
}

// cache.shared: an answer one edge kept is served by another without a
// call to the backend, with its age; a purge drops it from the bucket and
// every edge's memory, and the next call goes to the backend again.
func TestResponseCacheShared(t *testing.T) {
	be := newCacheBackend(t)
	g := newGateway(t)
	second, _, _ := g.AddEdge(t, edge.Options{})
	g.Publish(`{"name":"shared","pool":"p","route":{"path":"/shared/{id}"},"backend":{"type":"http","url":"` + be.URL + `/s/{id}"},
		"cache":{"ttl":"1h","shared":true}}`)
	g.Publish(`{"name":"own","pool":"p","route":{"path":"/own/{id}"},"backend":{"type":"http","url":"` + be.URL + `/o/{id}"},
		"cache":{"ttl":"1h"}}`)
	natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
		if r := jetwaytest.Do(t, second, "GET", "/own/0", nil); r.Status != 200 {
			return fmt.Errorf("second edge: %d", r.Status)
		}
		return nil
	})
	be.calls.Store(0)
	first := jetwaytest.Do(t, second, "GET", "/shared/1?a=1", nil)
	if first.Status != 200 || first.Header.Get("X-Cache") != "miss" {
		t.Fatalf("first: %d %s", first.Status, first.Header.Get("X-Cache"))
	}
	// The publish to the bucket is not acknowledged: the other edge may
	// look before it is stored, so wait for it.
	js, err := jetstream.New(g.Conn)
	if err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		st, err := js.Stream(t.Context(), "KV_"+bus.BucketCache)
		if err != nil {
			return err
		}
		if st.CachedInfo().State.Msgs == 0 {
			return fmt.Errorf("the answer is not in the bucket yet")
		}
		return nil
	})
	r := g.Do("GET", "/shared/1?a=1", nil)
	if r.Header.Get("X-Cache") != "hit" || r.Body != first.Body || r.Header.Get("Age") == "" || be.calls.Load() != 1 {
		t.Fatalf("the other edge: %s %q vs %q, Age %q, %d backend calls", r.Header.Get("X-Cache"), r.Body, first.Body, r.Header.Get("Age"), be.calls.Load())
	}
	var b bytes.Buffer
	_ = g.Metrics.WritePrometheus(&b)
	if !strings.Contains(b.String(), `result="shared"} 1`) {
		t.Errorf("the shared hit is not counted:\n%s", grepLines(b.String(), "cache"))
	}
	// Another key, and an API without shared, are not served from it.
	if x := g.Do("GET", "/shared/1?a=2", nil).Header.Get("X-Cache"); x != "miss" {
		t.Errorf("another query: %s", x)
	}
	jetwaytest.Do(t, second, "GET", "/own/1", nil)
	time.Sleep(50 * time.Millisecond)
	if x := g.Do("GET", "/own/1", nil).Header.Get("X-Cache"); x != "miss" {
		t.Errorf("an API that does not share: %s", x)
	}

	// A purge drops it from the bucket before the edges drop theirs.
	if err := edge.PurgeShared(t.Context(), js, "shared", "/shared/1"); err != nil {
		t.Fatal(err)
	}
	if err := g.Conn.Publish(bus.CachePurgeSubject, []byte(`{"api":"shared","path":"/shared/1"}`)); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if x := g.Do("GET", "/shared/1?a=1", nil).Header.Get("X-Cache"); x != "miss" {
			return fmt.Errorf("after the purge: %s", x)
		}
		return nil
	})
}

// Regressions of the collapsing review: a first call that ends without an
// answer of the backend's (its caller's own short deadline, its caller
// gone) hands the lead to a waiting call instead of sending them all at
// once, and a deadline a caller cut is no failure of the backend's, so the
// others never get a stale answer for it.
func TestResponseCacheCollapseLeaderGone(t *testing.T) {
	var calls atomic.Int64
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		time.Sleep(300 * time.Millisecond)
		fmt.Fprintf(w, "call %d", n)
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	g.Publish(`{"name":"burst","pool":"p","route":{"path":"/burst/{k}"},"backend":{"type":"http","url":"` + be.URL + `/b/{k}"},"timeout":"5s",
		"cache":{"ttl":"1s","stale_if_error":"1h"}}`)
	burst := func(path string, lead func()) (stale int) {
		var wg sync.WaitGroup
		wg.Go(lead)
		time.Sleep(30 * time.Millisecond)
		var n atomic.Int64
		for range 10 {
			wg.Go(func() {
				r := g.Do("GET", path, nil)
				if r.Status != 200 {
					t.Errorf("%s: %d %s", path, r.Status, r.Body)
				}
				if r.Header.Get("X-Cache") == "stale" {
					n.Add(1)
				}
			})
		}
		wg.Wait()
		return int(n.Load())
	}
	// A leader with a 150ms X-Request-Timeout (time enough to reach the
	// backend, which takes 300ms, on a busy box): its call and one more.
	burst("/burst/a", func() { g.Do("GET", "/burst/a", nil, "X-Request-Timeout", "150ms") })
	if n := calls.Load(); n != 2 {
		t.Errorf("a short-deadline leader: %d backend calls, want 2", n)
	}
	// A leader whose caller goes away.
	calls.Store(0)
	burst("/burst/b", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", g.URL+"/burst/b", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	if n := calls.Load(); n != 2 {
		t.Errorf("a leader gone: %d backend calls, want 2", n)
	}
	// Stale within stale_if_error, the backend healthy: a caller's short
	// deadline makes nobody else get the stale answer.
	time.Sleep(1100 * time.Millisecond)
	if stale := burst("/burst/a", func() { g.Do("GET", "/burst/a", nil, "X-Request-Timeout", "30ms") }); stale != 0 {
		t.Errorf("%d of 10 callers got a stale answer for another caller's short deadline", stale)
	}
}

// A purge holds against a call already on its way: the answer of a call
// begun before the purge is neither kept on its edge nor shared, so no
// edge serves the purged content afterwards.
func TestResponseCachePurgeBeatsCallInFlight(t *testing.T) {
	var version atomic.Int64
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := version.Load()
		time.Sleep(300 * time.Millisecond)
		fmt.Fprintf(w, "v%d", v)
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	second, _, _ := g.AddEdge(t, edge.Options{})
	g.Publish(`{"name":"shared","pool":"p","route":{"path":"/shared/{id}"},"backend":{"type":"http","url":"` + be.URL + `/s/{id}"},"cache":{"ttl":"1h","shared":true}}`)
	natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
		if r := jetwaytest.Do(t, second, "GET", "/shared/0", nil); r.Status != 200 {
			return fmt.Errorf("second edge: %d", r.Status)
		}
		return nil
	})
	done := make(chan struct{})
	go func() { jetwaytest.Do(t, second, "GET", "/shared/1", nil); close(done) }()
	time.Sleep(100 * time.Millisecond)
	version.Store(1) // the content changed, and the operator purges
	js, err := jetstream.New(g.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := edge.PurgeShared(t.Context(), js, "shared", "/shared/1"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Conn.Request(bus.CachePurgeSubject, []byte(`{"api":"shared","path":"/shared/1"}`), time.Second); err != nil {
		t.Fatal(err)
	}
	<-done
	time.Sleep(50 * time.Millisecond)
	for _, base := range []string{g.URL, second} {
		if r := jetwaytest.Do(t, base, "GET", "/shared/1", nil); r.Body != "v1" {
			t.Errorf("%s after the purge: %s %s", base, r.Header.Get("X-Cache"), r.Body)
		}
	}
}

// waitersGoTogether publishes an API on a backend that answers slowly with
// answer, sends six calls of one key a moment apart, checks each gets
// status, and that the backend saw at least two at once: the calls that
// waited on the first went on together, not one after another as leaders.
func waitersGoTogether(t *testing.T, extra string, status int, answer func(w http.ResponseWriter)) {
	t.Helper()
	var inflight, most atomic.Int64
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(200 * time.Millisecond)
		answer(w)
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	g.Publish(`{"name":"together","pool":"p","route":{"path":"/together"},"backend":{"type":"http","url":"` + be.URL + `/t"},"timeout":"10s",` + extra + `}`)
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			if r := g.Do("GET", "/together", nil); r.Status != status {
				t.Errorf("%d %s", r.Status, r.Body)
			}
		})
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	if most.Load() < 2 {
		t.Errorf("the waiting calls went to the backend one after another (at most %d at once)", most.Load())
	}
}

// An answer kept for stale-if-error alone (max-age=0) serves nobody who
// waited for it.
func TestResponseCacheCollapseKeptForErrorsOnly(t *testing.T) {
	waitersGoTogether(t, `"cache":{"ttl":"1m","stale_if_error":"1h"}`, 200, func(w http.ResponseWriter) {
		w.Header().Set("Cache-Control", "max-age=0")
		fmt.Fprint(w, "ok")
	})
}

// A cached API whose answer its response rewrite cannot read fails every
// call alike.
func TestResponseCacheCollapseUnreadableAnswer(t *testing.T) {
	waitersGoTogether(t, `"cache":{"ttl":"1m"},"rewrite":{"response":{"body":{"remove":["/a"]}}}`, 502, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"a":1,"a":2}`) // a key twice: the rewrite refuses to read it
	})
}
