package edge_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

// echoRequest answers with what the backend got: method, query, the
// headers a rewrite touches, and the body.
func echoRequest(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Internal", "secret")
		if r.URL.Query().Get("status") == "404" {
			w.WriteHeader(404)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"method": r.Method, "query": r.URL.RawQuery, "tenant": r.Header.Values("X-Tenant"),
			"trace": r.Header.Get("X-Debug"), "body": json.RawMessage(orNull(b)), "code": 0,
		})
	}))
	t.Cleanup(s.Close)
	return s
}

func orNull(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}

// Declared rewrites change what the backend gets (method, headers, query,
// JSON body by pointer) and what the caller gets (status, headers, body),
// with no code; a field that is missing is no error.
func TestRewrite(t *testing.T) {
	be := echoRequest(t)
	g := newGateway(t)
	g.Publish(`{"name":"rw","pool":"p","route":{"method":"PUT","path":"/rw"},"backend":{"type":"http","url":"` + be.URL + `/x"},
		"rewrite":{
		  "request":{"method":"POST",
		    "headers":{"set":{"X-Tenant":"acme"},"add":{"X-Tenant":"second"},"remove":["X-Debug"]},
		    "query":{"set":{"v":"2"},"add":{"keep":"2"},"remove":["token"]},
		    "body":{"set":{"/meta/source":"jetway","/tags/-":"new"},"remove":["/password","/missing/deep"],"rename":{"/amt":"/amount","/gone":"/x"}}},
		  "response":{"status":{"404":200},"headers":{"remove":["X-Internal"],"set":{"X-Api-Version":"2"}},
		    "body":{"remove":["/code"],"rename":{"/body":"/request"}}}}}`)
	r := g.Do("PUT", "/rw?token=s3cret&keep=1&v=1&v=9", strings.NewReader(`{"amt":5,"password":"p","tags":["a"],"n":12345678901234567890}`),
		"Content-Type", "application/json", "X-Debug", "1", "X-Tenant", "caller")
	if r.Status != 200 || r.Header.Get("X-Internal") != "" || r.Header.Get("X-Api-Version") != "2" {
		t.Fatalf("%d X-Internal %q version %q: %s", r.Status, r.Header.Get("X-Internal"), r.Header.Get("X-Api-Version"), r.Body)
	}
	var got map[string]any
	dec := json.NewDecoder(strings.NewReader(r.Body))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"method": "POST", "query": "keep=1&v=2&keep=2", "tenant": []any{"acme", "second"}, "trace": ""}
	for k, v := range want {
		if fmt.Sprint(got[k]) != fmt.Sprint(v) {
			t.Errorf("%s: got %v, want %v", k, got[k], v)
		}
	}
	if _, ok := got["code"]; ok {
		t.Error("the response body's /code was not removed")
	}
	body, _ := json.Marshal(got["request"])
	if string(body) != `{"amount":5,"meta":{"source":"jetway"},"n":12345678901234567890,"tags":["a","new"]}` {
		t.Errorf("the backend got %s", body)
	}
	// The backend's 404 maps to 200 (checked above with a 200 backend);
	// through the map:
	if r := g.Do("PUT", "/rw?status=404", strings.NewReader(`{}`), "Content-Type", "application/json"); r.Status != 200 {
		t.Errorf("a mapped 404: %d", r.Status)
	}
	// A body the rewrite cannot read is refused, never sent unchanged.
	if r := g.Do("PUT", "/rw", strings.NewReader(`{"password":"p"}`), "Content-Type", "text/plain"); r.Status != 400 || r.Code != "BAD_REQUEST" {
		t.Errorf("a non-JSON body: %d %s", r.Status, r.Body)
	}
	if r := g.Do("PUT", "/rw", strings.NewReader(`{"tags":"not an array"}`), "Content-Type", "application/json"); r.Status != 400 {
		t.Errorf("a set whose way is blocked: %d %s", r.Status, r.Body)
	}
	// The set values are copied: two calls never share one.
	a := g.Do("PUT", "/rw", strings.NewReader(`{"meta":{}}`), "Content-Type", "application/json")
	b := g.Do("PUT", "/rw", strings.NewReader(`{}`), "Content-Type", "application/json")
	if !strings.Contains(a.Body, `"meta":{"source":"jetway"}`) || !strings.Contains(b.Body, `"meta":{"source":"jetway"}`) {
		t.Errorf("%s / %s", a.Body, b.Body)
	}
}

// A rewrite that touches Jetway's own headers or framing, a bad pointer or
// a status map to 1xx is refused at publish.
func TestRewriteRefusedAtPublish(t *testing.T) {
	g := newGateway(t)
	for _, rw := range []string{
		`{"request":{"headers":{"set":{"X-Forwarded-For":"1.2.3.4"}}}}`,
		`{"request":{"headers":{"remove":["Content-Length"]}}}`,
		`{"request":{"headers":{"set":{"Jetway-Status":"200"}}}}`,
		`{"response":{"headers":{"set":{"X-Cache":"hit"}}}}`,
		`{"request":{"body":{"remove":["no-slash"]}}}`,
		`{"request":{"body":{"rename":{"/a":"/a/b"}}}}`,
		`{"response":{"status":{"404":101}}}`,
		`{"request":{"headers":{"set":{"X-A":"x\r\nInjected: 1"}}}}`,
	} {
		_, err := g.Client.Put(t.Context(), []byte(`{"name":"bad","pool":"p","route":{"path":"/bad"},"backend":{"type":"mock"},"rewrite":`+rw+`}`))
		if err == nil {
			t.Errorf("accepted: %s", rw)
		}
	}
}

// Rewrites with CEL conditions: a request rewrite for the calls that hold
// it only, and a response rewrite on the answer's JSON — a third party's
// 200 with {"code": 7} becomes the 502 it is.
func TestRewriteWhen(t *testing.T) {
	be := echoRequest(t)
	g := newGateway(t)
	g.Publish(`{"name":"rww","pool":"p","route":{"method":"POST","path":"/rww"},"backend":{"type":"http","url":"` + be.URL + `/x"},
		"rewrite":{
		  "request":{"when":"\"x-legacy\" in request.headers","headers":{"set":{"X-Tenant":"legacy"}}},
		  "response":{"when":"response.status == 200 && response.json.body.fail == true","status":{"200":502},"headers":{"set":{"X-Upstream":"failed"}}}}}`)
	post := func(body string, hdr ...string) (int, string, string) {
		r := g.Do("POST", "/rww", strings.NewReader(body), append([]string{"Content-Type", "application/json"}, hdr...)...)
		return r.Status, r.Body, r.Header.Get("X-Upstream")
	}
	if _, body, _ := post(`{}`, "X-Legacy", "1"); !strings.Contains(body, `"tenant":["legacy"]`) {
		t.Errorf("with the header: %s", body)
	}
	if _, body, _ := post(`{}`); strings.Contains(body, "legacy") {
		t.Errorf("without the header: %s", body)
	}
	if status, _, mark := post(`{"fail":true}`); status != 502 || mark != "failed" {
		t.Errorf("a failing answer: %d %q", status, mark)
	}
	if status, _, mark := post(`{"fail":false}`); status != 200 || mark != "" {
		t.Errorf("a good answer: %d %q", status, mark)
	}
	// A condition that does not compile is refused at publish.
	if _, err := g.Client.Put(t.Context(), []byte(`{"name":"bad","pool":"p","route":{"path":"/bad"},"backend":{"type":"mock"},
		"rewrite":{"request":{"when":"request.method ==","method":"POST"}}}`)); err == nil || !strings.Contains(err.Error(), "rewrite.request.when") {
		t.Errorf("a bad condition: %v", err)
	}
}

// Regressions of the rewrite review: a rewritten body carries no stale
// Content-Length; a refreshed or last-good answer is kept rewritten; a set
// replaces a key equal but for case; a JSON answer the rewrite cannot
// read is a 502, never sent unchanged; what may be cached is the
// backend's to say; a set value must parse one way only.
func TestRewriteReview(t *testing.T) {
	var version atomic.Int64
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Internal", "x")
		switch r.URL.Query().Get("kind") {
		case "deep":
			fmt.Fprint(w, strings.Repeat("[", 200)+strings.Repeat("]", 200))
			return
		case "cookie":
			w.Header().Set("Set-Cookie", "s=1")
		}
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, `{"secret":"s3cret","v":%d,"got":%s}`, version.Load(), orNull(b))
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	g.Publish(`{"name":"rr","pool":"p","route":{"method":"*","path":"/rr"},"backend":{"type":"http","url":"` + be.URL + `/x"},
		"fallback":{"cached":true},
		"cache":{"ttl":"100ms","stale_while_revalidate":"1h"},
		"rewrite":{"request":{"body":{"set":{"/isAdmin":false}}},
		  "response":{"headers":{"remove":["X-Internal","Set-Cookie"]},"body":{"remove":["/secret"]}}}}`)
	r := g.Do("GET", "/rr", nil)
	if r.Status != 200 || strings.Contains(r.Body, "secret") || r.Header.Get("X-Internal") != "" {
		t.Fatalf("%d %s", r.Status, r.Body) // Do fails the test on a body shorter than its Content-Length
	}
	// The stale answer's background refresh is kept rewritten too.
	version.Store(1)
	time.Sleep(150 * time.Millisecond)
	g.Do("GET", "/rr", nil) // stale: refreshes
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		r := g.Do("GET", "/rr", nil)
		if !strings.Contains(r.Body, `"v":1`) || r.Header.Get("X-Cache") != "hit" {
			return fmt.Errorf("not refreshed: %q %s", r.Header.Get("X-Cache"), r.Body)
		}
		if strings.Contains(r.Body, "secret") || r.Header.Get("X-Internal") != "" {
			return fmt.Errorf("the refresh kept the answer unrewritten: %s", r.Body)
		}
		return nil
	})
	// A set replaces a key equal but for case: a Go backend reads one value.
	r = g.Do("POST", "/rr", strings.NewReader(`{"isadmin":true}`), "Content-Type", "application/json")
	if strings.Contains(r.Body, "isadmin") || !strings.Contains(r.Body, `"isAdmin":false`) {
		t.Errorf("case-folded key: %s", r.Body)
	}
	// The degrade switch's cached answer is the rewritten one.
	if _, err := g.Client.SetDegrade(t.Context(), "rr", &registry.Degrade{On: true, Cached: true}); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
		r := g.Do("GET", "/rr", nil)
		if r.Header.Get("X-Jetway-Degraded") != "cached" {
			return fmt.Errorf("not degraded yet: %d", r.Status)
		}
		if strings.Contains(r.Body, "secret") {
			return fmt.Errorf("the degraded answer is unrewritten: %s", r.Body)
		}
		return nil
	})
	if err := g.Client.ClearDegrade(t.Context(), "rr"); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
		if r := g.Do("GET", "/rr?kind=deep", nil); r.Status != 502 {
			return fmt.Errorf("a JSON answer the rewrite cannot read: %d %.80s", r.Status, r.Body)
		}
		return nil
	})
	// The backend set a cookie: not kept, though the rewrite removes it.
	g.Do("GET", "/rr?kind=cookie", nil)
	if x := g.Do("GET", "/rr?kind=cookie", nil).Header.Get("X-Cache"); x != "miss" {
		t.Errorf("an answer with Set-Cookie was cached: %q", x)
	}
	_, err := g.Client.Put(t.Context(), []byte(`{"name":"bad","pool":"p","route":{"path":"/bad"},"backend":{"type":"mock"},
		"rewrite":{"request":{"body":{"set":{"/a":{"k":1,"k":2}}}}}}`))
	if err == nil || !strings.Contains(err.Error(), "one way only") {
		t.Errorf("a set value with a key twice: %v", err)
	}
}

// A path rewrite: the backend's URL takes the rewritten path as
// {request.path}; a replacement that makes a path no caller could send is
// refused; the placeholder must sit in the URL's path.
func TestRewritePath(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.URL.EscapedPath())
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	g.Publish(`{"name":"rp","pool":"p","route":{"path":"/v1/*"},"backend":{"type":"http","url":"` + be.URL + `/base/{request.path}"},
		"rewrite":{"request":{"path":{"regex":"^/v1/(.*)$","replace":"/v2/$1"}}}}`)
	if r := g.Do("GET", "/v1/orders/caf%C3%A9", nil); r.Body != "/base/v2/orders/caf%C3%A9" {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	g.Publish(`{"name":"rp2","pool":"p","route":{"path":"/w1/*"},"backend":{"type":"http","url":"` + be.URL + `/{request.path}"},
		"rewrite":{"request":{"path":{"regex":"^/w1/(.*)$","replace":"/w2//$1"}}}}`)
	if r := g.Do("GET", "/w1/x", nil); r.Status != 400 || !strings.Contains(r.Body, "not a canonical path") {
		t.Fatalf("a replacement making //: %d %s", r.Status, r.Body)
	}
	for _, url := range []string{be.URL + "/x?p={request.path}", be.URL + "{request.path}"} {
		if _, err := g.Client.Put(t.Context(), []byte(`{"name":"bad","pool":"p","route":{"path":"/bad"},"backend":{"type":"http","url":"`+url+`"}}`)); err == nil {
			t.Errorf("accepted: %s", url)
		}
	}
	if _, err := g.Client.Put(t.Context(), []byte(`{"name":"bad","pool":"p","route":{"path":"/bad"},"backend":{"type":"mock"},
		"rewrite":{"request":{"path":{"regex":"(","replace":"/x"}}}}`)); err == nil {
		t.Error("a bad regexp was accepted")
	}
}

// A path template builds the backend's path from the route's parameters,
// escaped as the caller sent them; a parameter it does not know, or a
// template and a regex together, are refused at publish.
func TestRewritePathTemplate(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.URL.EscapedPath())
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	g.Publish(`{"name":"rt","pool":"p","route":{"path":"/v1/users/{id}/files/*"},"backend":{"type":"http","url":"` + be.URL + `/{request.path}"},
		"rewrite":{"request":{"path":{"template":"/internal/{id}/blob/{*}"}}}}`)
	if r := g.Do("GET", "/v1/users/a%20b/files/x/caf%C3%A9", nil); r.Status != 200 || r.Body != "/internal/a%20b/blob/x/caf%C3%A9" {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	// An empty catch-all would make the path end in "/", which it may.
	if r := g.Do("GET", "/v1/users/7/files/", nil); r.Body != "/internal/7/blob/" {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	for _, p := range []string{
		`{"template":"/x/{nope}"}`,
		`{"template":"/x/{*}"}`, // route below has no catch-all
		`{"template":"x/{id}"}`,
		`{"template":"/x/{id}","regex":"^/(.*)$","replace":"/$1"}`,
		`{"regex":"^/(.*)$"}`,
		`{"template":"/x/{request.path}"}`,
	} {
		_, err := g.Client.Put(t.Context(), []byte(`{"name":"bad","pool":"p","route":{"path":"/bad/{id}"},"backend":{"type":"mock"},"rewrite":{"request":{"path":`+p+`}}}`))
		if err == nil {
			t.Errorf("accepted: %s", p)
		}
	}
}

// A host rewrite gives an http backend the Host the entry names, on the
// connection to its URL's address; X-Forwarded-Host still tells the
// caller's. A worker sends no Host its entry does not name, whatever a
// request on the bus asks for.
func TestRewriteHost(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s|%s", r.Host, r.Header.Get("X-Forwarded-Host"))
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	api := g.Publish(`{"name":"rh","pool":"p","route":{"path":"/rh"},"backend":{"type":"http","url":"` + be.URL + `/"},
		"rewrite":{"request":{"host":"partner.example.com:8443","when":"request.query.h == '1'"}}}`)
	if r := g.Do("GET", "/rh?h=1", nil); r.Status != 200 || !strings.HasPrefix(r.Body, "partner.example.com:8443|127.0.0.1:") {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	if r := g.Do("GET", "/rh", nil); r.Status != 200 || !strings.HasPrefix(r.Body, strings.TrimPrefix(be.URL, "http://")+"|") {
		t.Fatalf("without the condition: %d %s", r.Status, r.Body)
	}
	// A request on the bus naming another Host (a compromised edge's) is
	// refused by the worker.
	h := nats.Header{}
	bus.EncodeRequest(h, &bus.Meta{Method: "GET", Path: "/rh", RequestID: "forged", Host: "admin.internal", Deadline: time.Now().Add(2 * time.Second)})
	m, err := g.Conn.RequestMsg(&nats.Msg{Subject: api.Subject(), Header: h}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := bus.DecodeReply(m.Header); err != nil || rep.Code != bus.CodeBadRequest {
		t.Fatalf("a Host the entry does not name: %+v %v %s", rep, err, m.Data)
	}
	for _, host := range []string{`"*.example.com"`, `"Example.com"`, `"a.com:0"`, `"a.com:99999"`, `"a b"`, `"1.2.3.4"`} {
		_, err := g.Client.Put(t.Context(), []byte(`{"name":"bad","pool":"p","route":{"path":"/bad"},"backend":{"type":"mock"},"rewrite":{"request":{"host":`+host+`}}}`))
		if err == nil {
			t.Errorf("accepted host %s", host)
		}
	}
	if _, err := g.Client.Put(t.Context(), []byte(`{"name":"bad","pool":"p","route":{"path":"/bad"},"backend":{"type":"nats","subject":"svc.x"},"rewrite":{"request":{"host":"a.example.com"}}}`)); err == nil {
		t.Error("a host rewrite for a nats service was accepted")
	}
}

// Regressions of the rewrite review: a path rewrite that leaves a route
// parameter out of the path still keys the cache by the caller's path (the
// backend's URL takes the parameter), so one tenant never gets another's
// answer; a query parameter set or added that a keyed query would drop is
// refused at publish, as is a signed port in a host.
func TestRewriteWithCacheReview(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.URL.RequestURI())
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	g.Publish(`{"name":"td","pool":"p","route":{"path":"/td/{id}/{tenant}"},"backend":{"type":"http","url":"` + be.URL + `/t/{tenant}/{request.path}"},
		"cache":{"ttl":"1m"},"rewrite":{"request":{"path":{"template":"/u/{id}"}}}}`)
	if r := g.Do("GET", "/td/1/alice", nil); r.Body != "/t/alice/u/1" {
		t.Fatalf("alice: %s", r.Body)
	}
	if r := g.Do("GET", "/td/1/mallory", nil); r.Body != "/t/mallory/u/1" || r.Header.Get("X-Cache") != "miss" {
		t.Fatalf("mallory got %s (%s)", r.Body, r.Header.Get("X-Cache"))
	}
	for _, doc := range []string{
		`"cache":{"ttl":"1m","key":{"query":["id"]}},"rewrite":{"request":{"query":{"add":{"tenant":"acme"}}}}`,
		`"cache":{"ttl":"1m","key":{"query":["id"]}},"rewrite":{"request":{"query":{"set":{"v":"2"}}}}`,
		`"rewrite":{"request":{"host":"a.example:+80"}}`,
	} {
		if _, err := g.Client.Put(t.Context(), []byte(`{"name":"bad","pool":"p","route":{"path":"/bad"},"backend":{"type":"http","url":"http://x.invalid/"},`+doc+`}`)); err == nil {
			t.Errorf("accepted: %s", doc)
		}
	}
}

// The worker's cached fallback keys the route parameters too: with a path
// rewrite that leaves one out of the path, a failing backend's fallback
// never answers one tenant with another's last good answer.
func TestRewriteWithCachedFallback(t *testing.T) {
	var failing atomic.Bool
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(500)
			return
		}
		fmt.Fprint(w, r.URL.RequestURI())
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	g.Publish(`{"name":"fbt","pool":"p","route":{"path":"/fbt/{id}/{tenant}"},"backend":{"type":"http","url":"` + be.URL + `/t/{tenant}/{request.path}"},
		"rewrite":{"request":{"path":{"template":"/u/{id}"}}},"fallback":{"cached":true}}`)
	if r := g.Do("GET", "/fbt/1/alice", nil); r.Body != "/t/alice/u/1" {
		t.Fatalf("alice: %d %s", r.Status, r.Body)
	}
	failing.Store(true)
	if r := g.Do("GET", "/fbt/1/alice", nil); r.Body != "/t/alice/u/1" || r.Header.Get("X-Jetway-Fallback") != "cached" {
		t.Errorf("alice's own fallback: %d %s %v", r.Status, r.Body, r.Header)
	}
	if r := g.Do("GET", "/fbt/1/mallory", nil); strings.Contains(r.Body, "alice") {
		t.Errorf("mallory got alice's answer: %d %s", r.Status, r.Body)
	}
}

// A degrade switch's cached answer is looked up by the caller's request,
// and kept by it too, whatever a rewrite sent the backend.
func TestRewriteWithDegradeCached(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.URL.RequestURI())
	}))
	t.Cleanup(be.Close)
	g := newGateway(t)
	g.Publish(`{"name":"rd","pool":"p","route":{"path":"/rd/*"},"backend":{"type":"http","url":"` + be.URL + `/{request.path}"},
		"fallback":{"cached":true},"rewrite":{"request":{"path":{"regex":"^/rd/(.*)$","replace":"/v2/$1"},"query":{"set":{"v":"2"}}}}}`)
	if r := g.Do("GET", "/rd/x?q=1", nil); r.Body != "/v2/x?q=1&v=2" {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	if _, err := g.Client.SetDegrade(t.Context(), "rd", &registry.Degrade{On: true, Cached: true}); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
		r := g.Do("GET", "/rd/x?q=1", nil)
		if r.Header.Get("X-Jetway-Degraded") != "cached" || r.Body != "/v2/x?q=1&v=2" {
			return fmt.Errorf("degraded: %d %s %v", r.Status, r.Body, r.Header)
		}
		return nil
	})
}
