package edge_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"

	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/sign"
)

// keyBackend answers its name and remembers the X-Api-Key and
// X-Jetway-Sandbox each call brought.
type keyBackend struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newKeyBackend(t *testing.T, name string) *keyBackend {
	b := &keyBackend{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.seen = append(b.seen, fmt.Sprintf("key=%q sandbox=%q", r.Header.Get("X-Api-Key"), r.Header.Get("X-Jetway-Sandbox")))
		b.mu.Unlock()
		io.WriteString(w, name)
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *keyBackend) last() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.seen) == 0 {
		return ""
	}
	return b.seen[len(b.seen)-1]
}

func (b *keyBackend) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.seen)
}

// liveAndSandboxApps stores two apps granted every API, "live" and the
// sandbox app "tester", and returns their keys.
func liveAndSandboxApps(g *gateway) (liveKey, testKey string) {
	liveKey, liveRec, _ := registry.NewAPIKey()
	testKey, testRec, _ := registry.NewAPIKey()
	g.PutApps(
		&registry.App{ID: "live", Status: registry.AppActive, Keys: []registry.AppKey{liveRec}, APIs: []string{"*"}},
		&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{testRec}, APIs: []string{"*"}, Sandbox: true},
	)
	return liveKey, testKey
}

// TestDrafts: a draft is served to sandbox apps only, on its API's route
// or on a route of its own, and says which revision answered.
func TestDrafts(t *testing.T) {
	prod, draft := newKeyBackend(t, "production"), newKeyBackend(t, "draft")
	g := newGateway(t)
	liveKey, testKey := liveAndSandboxApps(g)
	g.Publish(`{"name":"orders","pool":"orders","route":{"path":"/orders/{id}"},"auth":{"methods":["key"]},
		"backend":{"type":"http","url":"` + prod.URL + `/o/{id}"}}`)
	d := g.PublishDraft(`{"name":"orders","pool":"orders","route":{"path":"/orders/{id}"},"auth":{"methods":["key"]},
		"backend":{"type":"http","url":"` + draft.URL + `/o/{id}"}}`)
	rev := strconv.FormatUint(d.Revision, 10)

	t.Run("on its API's route, sandbox apps get the draft", func(t *testing.T) {
		if r := g.Do("GET", "/orders/1", nil, "X-Api-Key", liveKey); r.Status != 200 || r.Body != "production" || r.Header.Get("X-Jetway-Draft") != "" {
			t.Fatalf("production app: %d %q draft %q", r.Status, r.Body, r.Header.Get("X-Jetway-Draft"))
		}
		r := g.Do("GET", "/orders/1", nil, "X-Api-Key", testKey)
		if r.Status != 200 || r.Body != "draft" || r.Header.Get("X-Jetway-Draft") != rev || r.Header.Get("X-Jetway-Sandbox") != "true" {
			t.Fatalf("sandbox app: %d %q draft %q sandbox %q", r.Status, r.Body, r.Header.Get("X-Jetway-Draft"), r.Header.Get("X-Jetway-Sandbox"))
		}
		if got := draft.last(); got != `key="" sandbox="true"` {
			t.Fatalf("the draft's backend saw %s", got)
		}
	})

	g.Publish(`{"name":"stock","pool":"orders","route":{"path":"/stock"},"backend":{"type":"http","url":"` + prod.URL + `"}}`)
	g.PublishDraft(`{"name":"stock","pool":"orders","route":{"path":"/stock"},"auth":{"methods":["key"]},
		"backend":{"type":"http","url":"` + draft.URL + `"}}`)
	t.Run("an open API's draft takes a sandbox app's credentials; others pass through as before", func(t *testing.T) {
		if r := g.Do("GET", "/stock", nil); r.Status != 200 || r.Body != "production" {
			t.Fatalf("anonymous: %d %s", r.Status, r.Body)
		}
		if r := g.Do("GET", "/stock", nil, "X-Api-Key", liveKey); r.Status != 200 || r.Body != "production" {
			t.Fatalf("production app: %d %s", r.Status, r.Body)
		}
		// The open API's backend still gets what the caller sent.
		if got := prod.last(); got != fmt.Sprintf("key=%q sandbox=\"\"", liveKey) {
			t.Fatalf("production saw %s", got)
		}
		if r := g.Do("GET", "/stock", nil, "X-Api-Key", testKey); r.Status != 200 || r.Body != "draft" {
			t.Fatalf("sandbox app: %d %s", r.Status, r.Body)
		}
		if got := draft.last(); got != `key="" sandbox="true"` {
			t.Fatalf("the draft's backend saw %s", got)
		}
	})

	g.PublishDraft(`{"name":"refunds","pool":"orders","route":{"method":"POST","path":"/refunds"},"auth":{"methods":["key"]},
		"backend":{"type":"http","url":"` + draft.URL + `"}}`)
	t.Run("a new API's draft is there for sandbox apps alone", func(t *testing.T) {
		before := draft.count()
		for _, hdr := range [][]string{nil, {"X-Api-Key", liveKey}, {"X-Api-Key", "not-a-key"}} {
			r := g.Do("POST", "/refunds", nil, hdr...)
			if r.Status != 404 || r.Code != "ROUTE_NOT_FOUND" {
				t.Fatalf("with %v: %d %s, want the 404 of no route", hdr, r.Status, r.Body)
			}
		}
		if draft.count() != before {
			t.Fatal("a production caller reached the draft")
		}
		if r := g.Do("POST", "/refunds", nil, "X-Api-Key", testKey); r.Status != 200 || r.Body != "draft" {
			t.Fatalf("sandbox app: %d %s", r.Status, r.Body)
		}
	})

	t.Run("a draft that drops a method refuses it", func(t *testing.T) {
		g.PublishDraft(`{"name":"orders","pool":"orders","route":{"path":"/orders/{id}"},"auth":{"methods":["hmac"]},
			"backend":{"type":"http","url":"` + draft.URL + `/o/{id}"}}`)
		r := g.Do("GET", "/orders/1", nil, "X-Api-Key", testKey)
		if r.Status != 401 || r.Code != "UNAUTHENTICATED" {
			t.Fatalf("sandbox app's key on an hmac-only draft: %d %s", r.Status, r.Body)
		}
		if r := g.Do("GET", "/orders/1", nil, "X-Api-Key", liveKey); r.Status != 200 || r.Body != "production" {
			t.Fatalf("production app: %d %s", r.Status, r.Body)
		}
	})

	t.Run("deleting the draft gives sandbox apps the API as it is", func(t *testing.T) {
		if err := g.Client.Delete(t.Context(), registry.DraftKey("stock")); err != nil {
			t.Fatal(err)
		}
		natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
			if g.EdgeWatcher.Current().Drafts["stock"] != nil {
				return fmt.Errorf("the edge still has the draft")
			}
			return nil
		})
		// An open API: the sandbox app is an anonymous caller there.
		if r := g.Do("GET", "/stock", nil, "X-Api-Key", testKey); r.Status != 200 || r.Body != "production" {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	})
}

// A draft never answers from production's cache, nor production from the
// draft's, shared cache included: the same settings on one route keep two
// stores.
func TestDraftCacheIsItsOwn(t *testing.T) {
	// One backend for both, so both have the same cache settings and
	// target: it tells the calls apart by X-Jetway-Sandbox.
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Jetway-Sandbox") == "true" {
			io.WriteString(w, "draft")
			return
		}
		io.WriteString(w, "production")
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	liveKey, testKey := liveAndSandboxApps(g)
	entry := func(url string) string {
		return `{"name":"cat","pool":"p","route":{"path":"/cat"},"auth":{"methods":["key"]},
			"cache":{"ttl":"1m","shared":true,"key":{"app":false}},"backend":{"type":"http","url":"` + url + `"}}`
	}
	g.Publish(entry(be.URL))
	if r := g.Do("GET", "/cat", nil, "X-Api-Key", liveKey); r.Body != "production" {
		t.Fatalf("production: %d %s", r.Status, r.Body)
	}
	g.PublishDraft(entry(be.URL))
	// A second edge has no local answers: only the shared cache could
	// give it production's.
	url, _, _ := g.addEdge(t)
	for _, base := range []string{g.URL, url} {
		r, err := http.DefaultClient.Do(mustRequest(t, base+"/cat", "X-Api-Key", testKey))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if string(b) != "draft" {
			t.Fatalf("sandbox app on %s: %d %s (cache %s)", base, r.StatusCode, b, r.Header.Get("X-Jetway-Cache"))
		}
	}
}

func mustRequest(t *testing.T, url string, hdr ...string) *http.Request {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return req
}

// A draft's failing backend opens the draft's breaker only: its events
// name <name>@draft, which no production breaker of the pool takes.
func TestDraftBreakerIsItsOwn(t *testing.T) {
	g := newGateway(t)
	liveKey, testKey := liveAndSandboxApps(g)
	ok := newKeyBackend(t, "production")
	prodEvents, draftEvents := g.BreakerEvents("brk"), g.BreakerEvents("brk@draft")
	breaker := `"breaker":{"consecutive_failures":1,"open_for":"1m"}`
	g.Publish(`{"name":"brk","pool":"p","route":{"path":"/brk"},"auth":{"methods":["key"]},` + breaker + `,"backend":{"type":"http","url":"` + ok.URL + `"}}`)
	g.PublishDraft(`{"name":"brk","pool":"p","route":{"path":"/brk"},"auth":{"methods":["key"]},` + breaker + `,"backend":{"type":"http","url":"http://127.0.0.1:1"}}`)
	for range 2 {
		g.Do("GET", "/brk", nil, "X-Api-Key", testKey)
	}
	if ev := jetwaytest.NextBreakerEvent(t, draftEvents); ev.To != "open" {
		t.Fatalf("draft breaker event %+v", ev)
	}
	select {
	case ev := <-prodEvents:
		t.Fatalf("production's breaker subject got %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
	if r := g.Do("GET", "/brk", nil, "X-Api-Key", liveKey); r.Status != 200 || r.Body != "production" {
		t.Fatalf("production after the draft's breaker opened: %d %s", r.Status, r.Body)
	}
}

// Found by review. A draft's route of its own never takes production's
// requests, even when an entry written around the client asks it to
// (nats kv put): the edge leaves it unrouted. Nor does its method tell a
// caller it is there.
func TestDraftNeverShadowsProduction(t *testing.T) {
	prod, draft := newKeyBackend(t, "production"), newKeyBackend(t, "draft")
	g := newGateway(t)
	liveKey := g.PutKeyedApp("live")
	g.Publish(`{"name":"orders","pool":"p","route":{"path":"/orders/{id}"},"auth":{"methods":["key"]},"backend":{"type":"http","url":"` + prod.URL + `"}}`)
	js, err := jetstream.New(g.Conn)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := registry.OpenAPIs(t.Context(), js, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "draft.special", []byte(`{"name":"special","pool":"p","route":{"path":"/orders/special"},"auth":{"methods":["key"]},"backend":{"type":"http","url":"`+draft.URL+`"}}`)); err != nil {
		t.Fatal(err)
	}
	g.PublishDraft(`{"name":"refunds","pool":"p","route":{"method":"POST","path":"/refunds"},"auth":{"methods":["key"]},"backend":{"type":"http","url":"` + draft.URL + `"}}`)
	natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
		if g.EdgeWatcher.Current().Drafts["special"] == nil {
			return fmt.Errorf("the edge has not read the raw draft")
		}
		return nil
	})
	if r := g.Do("GET", "/orders/special", nil, "X-Api-Key", liveKey); r.Status != 200 || r.Body != "production" {
		t.Fatalf("production under a raw draft's literal route: %d %s", r.Status, r.Body)
	}
	if r := g.Do("GET", "/refunds", nil); r.Status != 404 || r.Code != "ROUTE_NOT_FOUND" {
		t.Fatalf("another method on a draft's own route: %d %s", r.Status, r.Body)
	}
}

// Found by review: a body read in part for a draft's signature check is
// never read again from where that read stopped.
func TestDraftSignatureCheckKeepsTheBodyWhole(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	g.Publish(`{"name":"up","pool":"p","route":{"method":"POST","path":"/up"},"max_body":"16B","backend":{"type":"http","url":"` + be.URL + `"}}`)
	g.PublishDraft(`{"name":"up","pool":"p","route":{"method":"POST","path":"/up"},"max_body":"16B","auth":{"methods":["hmac"]},"backend":{"type":"http","url":"` + be.URL + `"}}`)
	for _, authz := range []string{"", sign.Scheme + " app=x"} {
		req, _ := http.NewRequest("POST", g.URL+"/up", io.MultiReader(strings.NewReader(strings.Repeat("A", 17)+"tail!")))
		req.ContentLength = -1 // chunked
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 413 {
			t.Errorf("authorization %q: %d %q, want 413", authz, r.StatusCode, b)
		}
	}
}

// Found by review: only Jetway says which draft revision answered.
func TestDraftHeaderIsJetways(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Jetway-Draft", "999")
		io.WriteString(w, "ok")
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	testKey, testRec, _ := registry.NewAPIKey()
	g.PutApps(&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{testRec}, APIs: []string{"*"}, Sandbox: true})
	d := g.PublishDraft(`{"name":"h","pool":"p","route":{"path":"/h"},"auth":{"methods":["key"]},"backend":{"type":"http","url":"` + be.URL + `"}}`)
	if r := g.Do("GET", "/h", nil, "X-Api-Key", testKey); r.Header.Get("X-Jetway-Draft") != strconv.FormatUint(d.Revision, 10) {
		t.Fatalf("X-Jetway-Draft %q, want %d", r.Header.Get("X-Jetway-Draft"), d.Revision)
	}
}

// Found by review: a draft that trusts another token issuer refuses the
// old issuer's tokens, as it will once promoted, and takes the new one's.
func TestDraftChecksItsOwnIssuer(t *testing.T) {
	oldKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	newKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	prod, draft := newKeyBackend(t, "production"), newKeyBackend(t, "draft")
	g := newGateway(t)
	g.PutApps(&registry.App{ID: "tester", Status: registry.AppActive, APIs: []string{"*"}, Sandbox: true})
	entry := func(iss string, k *ecdsa.PrivateKey, url string) string {
		return `{"name":"tok","pool":"p","route":{"path":"/tok"},"backend":{"type":"http","url":"` + url + `"},
			"auth":{"methods":["jwt"],"jwt":{"issuer":"` + iss + `","algorithms":["ES256"],"jwks_file":"` + ecJWKS(t, k) + `"}}}`
	}
	g.Publish(entry("https://old.test", oldKey, prod.URL))
	g.PublishDraft(entry("https://new.test", newKey, draft.URL))
	exp := time.Now().Add(time.Minute).Unix()
	oldTok := es256(t, oldKey, jwt.MapClaims{"iss": "https://old.test", "sub": "tester", "exp": exp})
	newTok := es256(t, newKey, jwt.MapClaims{"iss": "https://new.test", "sub": "tester", "exp": exp})
	if r := g.Do("GET", "/tok", nil, "Authorization", "Bearer "+oldTok); r.Status != 401 {
		t.Errorf("the old issuer's token on the draft: %d %s", r.Status, r.Body)
	}
	if r := g.Do("GET", "/tok", nil, "Authorization", "Bearer "+newTok); r.Status != 200 || r.Body != "draft" {
		t.Errorf("the new issuer's token: %d %s", r.Status, r.Body)
	}
}
