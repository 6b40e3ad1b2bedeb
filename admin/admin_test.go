package admin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/admin"
	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
)

const boot = "0123456789abcdef0123456789abcdef-bootstrap"

type env struct {
	t   *testing.T
	url string
	c   *registry.Client
	nc  *nats.Conn
}

func start(t *testing.T) *env { return startWith(t, nil) }

// startWith serves the admin API over a real NATS server with JetStream;
// opts, when set, completes its options (the connection is in them).
func startWith(t *testing.T, opts func(o *admin.Options)) *env {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := registry.NewClient(ctx, nc, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o := admin.Options{Client: c, Bootstrap: boot, Conn: nc}
	if opts != nil {
		opts(&o)
	}
	srv := httptest.NewServer(admin.New(o).Handler())
	t.Cleanup(srv.Close)
	return &env{t: t, url: srv.URL, c: c, nc: nc}
}

type resp struct {
	status int
	header http.Header
	body   string
	err    struct {
		Code     string `json:"code"`
		Revision uint64 `json:"current_revision"`
		Problems []struct{ Path string }
	}
}

func (e *env) do(token, method, path, body string, hdr ...string) resp {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	r := resp{status: res.StatusCode, header: res.Header, body: string(b)}
	_ = json.Unmarshal(b, &r.err)
	return r
}

func (e *env) token(role string) string {
	e.t.Helper()
	r := e.do(boot, "POST", "/v1/tokens", `{"name":"`+role+`-1","role":"`+role+`"}`)
	var v struct{ Token string }
	if r.status != 201 || json.Unmarshal([]byte(r.body), &v) != nil || !strings.HasPrefix(v.Token, "jwa_") {
		e.t.Fatalf("token: %d %s", r.status, r.body)
	}
	return v.Token
}

const entry = `{"name":"orders.get","pool":"p","route":{"path":"/v1/orders"},"backend":{"type":"mock","body":"ok"},"description":"<script>alert(1)</script>"}`

// Writes name the revision they change and cannot lose another's: a
// create of an existing name is 409, a change at a stale revision 412
// naming the one that won, a change without If-Match 428.
func TestAPIsCompareAndSet(t *testing.T) {
	e := start(t)
	r := e.do(boot, "POST", "/v1/apis", entry)
	if r.status != 201 || r.header.Get("ETag") == "" || r.header.Get("Location") != "/v1/apis/orders.get" {
		t.Fatalf("create: %d %v %s", r.status, r.header, r.body)
	}
	if r := e.do(boot, "POST", "/v1/apis", entry); r.status != 409 || r.err.Code != "EXISTS" {
		t.Errorf("create again: %d %s", r.status, r.body)
	}
	got := e.do(boot, "GET", "/v1/apis/orders.get", "")
	tag := got.header.Get("ETag")
	if got.status != 200 || tag != r.header.Get("ETag") || !strings.Contains(got.body, `"route"`) {
		t.Fatalf("get: %d %s %s", got.status, tag, got.body)
	}
	// A description is data, never markup: escaped in the JSON, which is
	// never sniffed.
	if strings.Contains(got.body, "<script>") || got.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("description not escaped: %s", got.body)
	}
	changed := strings.Replace(entry, `"ok"`, `"changed"`, 1)
	if r := e.do(boot, "PUT", "/v1/apis/orders.get", changed); r.status != 428 {
		t.Errorf("PUT without If-Match: %d %s", r.status, r.body)
	}
	put := e.do(boot, "PUT", "/v1/apis/orders.get", changed, "If-Match", tag)
	if put.status != 200 || put.header.Get("ETag") == tag {
		t.Fatalf("PUT at the revision: %d %s", put.status, put.body)
	}
	// A colleague's save at the revision read before loses nothing: 412.
	stale := e.do(boot, "PUT", "/v1/apis/orders.get", entry, "If-Match", tag)
	if stale.status != 412 || stale.err.Code != "REVISION_CONFLICT" || etagOf(stale.err.Revision) != put.header.Get("ETag") {
		t.Errorf("stale PUT: %d %s (now %s)", stale.status, stale.body, put.header.Get("ETag"))
	}
	if r := e.do(boot, "DELETE", "/v1/apis/orders.get", "", "If-Match", tag); r.status != 412 {
		t.Errorf("stale DELETE: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "DELETE", "/v1/apis/orders.get", "", "If-Match", put.header.Get("ETag")); r.status != 204 {
		t.Errorf("DELETE: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "GET", "/v1/apis/orders.get", ""); r.status != 404 {
		t.Errorf("GET after DELETE: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "PUT", "/v1/apis/orders.get", entry, "If-None-Match", "*"); r.status != 200 {
		t.Errorf("PUT If-None-Match * after delete: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "GET", "/v1/apis/orders.get/revisions", ""); r.status != 200 || strings.Count(r.body, `"revision"`) != 4 {
		t.Errorf("revisions: %d %s", r.status, r.body)
	}
}

func etagOf(rev uint64) string { b, _ := json.Marshal(rev); return `"` + string(b) + `"` }

// Bad input: an invalid entry lists its problems by field path; a name
// that is not the path's, a body over the limit, a malformed If-Match.
func TestAPIsBadInput(t *testing.T) {
	e := start(t)
	r := e.do(boot, "POST", "/v1/apis", `{"name":"x","pool":"p","route":{"path":"no-slash"},"backend":{"type":"http","url":"ftp://x"}}`)
	if r.status != 400 || r.err.Code != "INVALID_ENTRY" || len(r.err.Problems) < 2 {
		t.Errorf("invalid: %d %s", r.status, r.body)
	}
	paths := []string{}
	for _, p := range r.err.Problems {
		paths = append(paths, p.Path)
	}
	if !slices.Contains(paths, "route.path") {
		t.Errorf("problems %v lack route.path", paths)
	}
	if r := e.do(boot, "POST", "/v1/apis", `{"name":`); r.status != 400 {
		t.Errorf("malformed JSON: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "PUT", "/v1/apis/other", entry, "If-None-Match", "*"); r.status != 400 || !strings.Contains(r.body, "the name in the path") {
		t.Errorf("name mismatch: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "POST", "/v1/apis", `{"description":"`+strings.Repeat("x", admin.MaxBody)+`"}`); r.status != 413 {
		t.Errorf("huge body: %d %.200s", r.status, r.body)
	}
	if r := e.do(boot, "PUT", "/v1/apis/orders.get", entry, "If-Match", "yesterday"); r.status != 400 {
		t.Errorf("bad If-Match: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "GET", "/v1/nothing", ""); r.status != 404 || r.err.Code != "NOT_FOUND" {
		t.Errorf("unknown path: %d %s", r.status, r.body)
	}
}

// Every request needs a token, and a role that covers it; revoked tokens
// are refused; the audit trail names the token that wrote.
func TestTokensAndRoles(t *testing.T) {
	e := start(t)
	if r := e.do("", "GET", "/v1/apis", ""); r.status != 401 || r.header.Get("WWW-Authenticate") == "" {
		t.Errorf("no token: %d %s", r.status, r.body)
	}
	for _, bad := range []string{"nope", "jwa_0123456789abcdef_guess", boot + "x"} {
		if r := e.do(bad, "GET", "/v1/apis", ""); r.status != 401 {
			t.Errorf("token %q: %d %s", bad, r.status, r.body)
		}
	}
	viewer, operator, adm := e.token("viewer"), e.token("operator"), e.token("admin")
	if r := e.do(viewer, "GET", "/v1/apis", ""); r.status != 200 {
		t.Errorf("viewer reads: %d %s", r.status, r.body)
	}
	for _, tok := range []string{viewer, operator} {
		if r := e.do(tok, "POST", "/v1/apis", entry); r.status != 403 || r.err.Code != "FORBIDDEN" {
			t.Errorf("a write below admin: %d %s", r.status, r.body)
		}
	}
	if r := e.do(adm, "POST", "/v1/apis", entry); r.status != 201 {
		t.Fatalf("admin writes: %d %s", r.status, r.body)
	}
	if r := e.do(viewer, "PUT", "/v1/apis/orders.get/degrade", `{"on":true,"reason":"drill"}`, "If-None-Match", "*"); r.status != 403 {
		t.Errorf("viewer degrades: %d %s", r.status, r.body)
	}
	// An operator flips the switch, but an answer of its own would be what
	// every caller gets: an admin's to write.
	if r := e.do(operator, "PUT", "/v1/apis/orders.get/degrade", `{"on":true,"status":302,"headers":{"Location":"https://evil.example/"}}`, "If-None-Match", "*"); r.status != 403 {
		t.Errorf("operator writes a degrade answer: %d %s", r.status, r.body)
	}
	on := e.do(operator, "PUT", "/v1/apis/orders.get/degrade", `{"on":true,"reason":"drill"}`, "If-None-Match", "*")
	if on.status != 200 || on.header.Get("ETag") == "" {
		t.Fatalf("operator degrades: %d %s", on.status, on.body)
	}
	// The switch too is written at a revision: a second flip from the
	// state read before is refused.
	if r := e.do(operator, "PUT", "/v1/apis/orders.get/degrade", `{"on":false}`, "If-None-Match", "*"); r.status != 409 {
		t.Errorf("a second create of the switch: %d %s", r.status, r.body)
	}
	if r := e.do(operator, "DELETE", "/v1/apis/orders.get/degrade", ""); r.status != 428 {
		t.Errorf("DELETE of the switch without If-Match: %d %s", r.status, r.body)
	}
	if r := e.do(viewer, "GET", "/v1/apis/orders.get/degrade", ""); r.status != 200 || r.header.Get("ETag") != on.header.Get("ETag") {
		t.Errorf("GET the switch: %d %v %s", r.status, r.header, r.body)
	}
	if r := e.do(operator, "DELETE", "/v1/apis/orders.get/degrade", "", "If-Match", on.header.Get("ETag")); r.status != 204 {
		t.Errorf("DELETE of the switch: %d %s", r.status, r.body)
	}
	if r := e.do(operator, "DELETE", "/v1/apis/orders.get/degrade", "", "If-Match", on.header.Get("ETag")); r.status != 404 {
		t.Errorf("DELETE of a switch that is gone: %d %s", r.status, r.body)
	}
	if r := e.do(operator, "PUT", "/v1/apis/bad%2Fname/degrade", `{"on":true}`, "If-None-Match", "*"); r.status != 400 {
		t.Errorf("a bad api name: %d %s", r.status, r.body)
	}
	for _, k := range []string{"*", ">", "a%20b"} {
		if r := e.do(viewer, "GET", "/v1/audit?kind="+k, ""); r.status != 400 {
			t.Errorf("audit kind %q: %d %s", k, r.status, r.body)
		}
	}
	for _, tag := range []string{`W/"1"`, "*", `"1", "2"`} {
		if r := e.do(adm, "DELETE", "/v1/apis/orders.get", "", "If-Match", tag); r.status != 400 {
			t.Errorf("If-Match %s: %d %s", tag, r.status, r.body)
		}
	}
	if r := e.do(operator, "POST", "/v1/tokens", `{"name":"x","role":"admin"}`); r.status != 403 {
		t.Errorf("operator makes a token: %d %s", r.status, r.body)
	}
	if r := e.do(adm, "POST", "/v1/tokens", `{"name":"bad name!","role":"root"}`); r.status != 400 || len(r.err.Problems) != 2 {
		t.Errorf("bad token request: %d %s", r.status, r.body)
	}
	list := e.do(adm, "GET", "/v1/tokens", "")
	if list.status != 200 || strings.Count(list.body, `"id"`) != 3 || strings.Contains(list.body, "digest") || strings.Contains(list.body, "jwa_") {
		t.Errorf("token list: %d %s", list.status, list.body)
	}
	audit := e.do(viewer, "GET", "/v1/audit?kind=api", "")
	if audit.status != 200 || !strings.Contains(audit.body, `"actor":"token:admin-1/`) {
		t.Errorf("audit: %d %s", audit.status, audit.body)
	}
	if r := e.do(viewer, "GET", "/v1/audit?since=24h&kind=degrade", ""); !strings.Contains(r.body, `"actor":"token:operator-1/`) {
		t.Errorf("audit of the switch: %d %s", r.status, r.body)
	}
	var ts struct{ Items []struct{ ID, Name string } }
	_ = json.Unmarshal([]byte(list.body), &ts)
	for _, it := range ts.Items {
		if it.Name == "viewer-1" {
			if r := e.do(adm, "DELETE", "/v1/tokens/"+it.ID, ""); r.status != 204 {
				t.Errorf("revoke: %d %s", r.status, r.body)
			}
		}
	}
	if r := e.do(viewer, "GET", "/v1/apis", ""); r.status != 401 {
		t.Errorf("a revoked token: %d %s", r.status, r.body)
	}
}

// The checked-in OpenAPI document describes exactly the routes served.
func TestOpenAPIDocumentMatchesRoutes(t *testing.T) {
	e := start(t)
	r := e.do(boot, "GET", "/v1/openapi.json", "")
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if r.status != 200 || json.Unmarshal([]byte(r.body), &doc) != nil {
		t.Fatalf("%d %.200s", r.status, r.body)
	}
	documented := map[string]bool{}
	for p, ops := range doc.Paths {
		for m := range ops {
			documented[strings.ToUpper(m)+" "+p] = true
		}
	}
	served := map[string]bool{}
	h := admin.New(admin.Options{Client: e.c}).Handler().(chi.Routes)
	_ = chi.Walk(h, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served[method+" "+route] = true
		return nil
	})
	for k := range served {
		if !documented[k] {
			t.Errorf("served, not documented: %s", k)
		}
	}
	for k := range documented {
		if !served[k] {
			t.Errorf("documented, not served: %s", k)
		}
	}
}

// A fault drill over REST: an operator starts and ends it at its
// revision; an abort with an answer of its own needs an admin.
func TestFaultSwitch(t *testing.T) {
	e := start(t)
	op := e.token("operator")
	until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if r := e.do(op, "PUT", "/v1/apis/orders.get/fault", `{"abort":{"status":503,"percent":10,"body":"<b>x</b>"},"expires_at":"`+until+`"}`, "If-None-Match", "*"); r.status != 403 {
		t.Errorf("operator's abort with a body: %d %s", r.status, r.body)
	}
	on := e.do(op, "PUT", "/v1/apis/orders.get/fault", `{"abort":{"status":503,"percent":10},"expires_at":"`+until+`","reason":"game day"}`, "If-None-Match", "*")
	if on.status != 200 || on.header.Get("ETag") == "" {
		t.Fatalf("operator's drill: %d %s", on.status, on.body)
	}
	if r := e.do(op, "GET", "/v1/apis/orders.get/fault", ""); r.status != 200 || !strings.Contains(r.body, "game day") || r.header.Get("ETag") != on.header.Get("ETag") {
		t.Errorf("GET the drill: %d %s", r.status, r.body)
	}
	changed := e.do(op, "PUT", "/v1/apis/orders.get/fault", `{"abort":{"status":500,"percent":1},"expires_at":"`+until+`"}`, "If-Match", on.header.Get("ETag"))
	if changed.status != 200 {
		t.Fatalf("change the drill: %d %s", changed.status, changed.body)
	}
	if r := e.do(op, "PUT", "/v1/apis/orders.get/fault", `{"abort":{"status":502,"percent":1},"expires_at":"`+until+`"}`, "If-Match", on.header.Get("ETag")); r.status != 412 {
		t.Errorf("a stale change of the drill: %d %s", r.status, r.body)
	}
	if r := e.do(op, "DELETE", "/v1/apis/orders.get/fault", "", "If-Match", changed.header.Get("ETag")); r.status != 204 {
		t.Errorf("end the drill: %d %s", r.status, r.body)
	}
	if r := e.do(op, "PUT", "/v1/apis/orders.get/fault", `{"delay":{"min":"-1s","percent":10}}`, "If-None-Match", "*"); r.status != 400 || r.err.Code != "INVALID_ENTRY" {
		t.Errorf("an invalid drill: %d %s", r.status, r.body)
	}
}

// The live feed: a node's per-second records arrive as server-sent
// events, only for itself (a record naming another node is dropped) and
// only of the API asked for; the nodes list comes from the heartbeats.
func TestLiveRecordsAndNodes(t *testing.T) {
	e := startWith(t, func(o *admin.Options) {
		o.Nodes = func(time.Time) []bus.Heartbeat { return []bus.Heartbeat{{ID: "n1", Role: "edge"}} }
	})
	nc := e.nc
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r := e.do(boot, "GET", "/v1/nodes", ""); r.status != 200 || !strings.Contains(r.body, `"id":"n1"`) {
		t.Errorf("nodes: %d %s", r.status, r.body)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/v1/records/stream?api=orders.get", nil)
	req.Header.Set("Authorization", "Bearer "+boot)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	rd := bufio.NewReader(resp.Body)
	if line, _ := rd.ReadString('\n'); !strings.HasPrefix(line, ": jetway records") {
		t.Fatalf("first line %q", line)
	}
	publish := func(node string, recs string) {
		if err := nc.Publish("jetway.metrics.edge."+node, []byte(recs)); err != nil {
			t.Fatal(err)
		}
	}
	publish("e1", `[{"ts":"2026-12-01T00:00:00Z","api":"orders.get","node":"other","pass":9}]`) // names another node
	publish("e1", `[{"ts":"2026-12-01T00:00:00Z","api":"other.api","node":"e1","pass":8}]`)     // another API
	publish("e1", `[{"ts":"2026-12-01T00:00:01Z","api":"orders.get","node":"e1","pass":7}]`)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			if !strings.Contains(data, `"pass":7`) || strings.Contains(data, `"pass":9`) || strings.Contains(data, `"pass":8`) {
				t.Errorf("the first event: %s", data)
			}
			break
		}
	}
	if r := e.do("", "GET", "/v1/records/stream", ""); r.status != 401 {
		t.Errorf("a stream without a token: %d", r.status)
	}
}

// Apps over REST: a key made is shown once and never again, no list or
// get shows a credential, credentials in a body are refused, a rotation
// makes the old key stop and answers the new one, an operator may not.
func TestApps(t *testing.T) {
	e := start(t)
	op := e.token("operator")
	if r := e.do(op, "POST", "/v1/apps", `{"id":"shop","apis":["*"]}`); r.status != 403 {
		t.Errorf("operator makes an app: %d %s", r.status, r.body)
	}
	r := e.do(boot, "POST", "/v1/apps", `{"id":"shop","name":"Shop","apis":["orders.*"],"signing_secret":true}`)
	var made struct {
		Key           string `json:"key"`
		SigningSecret string `json:"signing_secret"`
	}
	if r.status != 201 || json.Unmarshal([]byte(r.body), &made) != nil || made.Key == "" || made.SigningSecret == "" || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "POST", "/v1/apps", `{"id":"shop","apis":["*"]}`); r.status != 409 {
		t.Errorf("create again: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "POST", "/v1/apps", `{"id":"evil","keys":[{"sha256":"00"}]}`); r.status != 400 {
		t.Errorf("a key given: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "POST", "/v1/apps", `{"id":"x","surprise":1}`); r.status != 400 {
		t.Errorf("an unknown field: %d %s", r.status, r.body)
	}
	for _, path := range []string{"/v1/apps", "/v1/apps/shop"} {
		got := e.do(op, "GET", path, "")
		if got.status != 200 || strings.Contains(got.body, made.Key) || strings.Contains(got.body, made.SigningSecret) || strings.Contains(got.body, "sha256") || !strings.Contains(got.body, `"keys":1`) {
			t.Errorf("%s: %d %s", path, got.status, got.body)
		}
	}
	rot := e.do(boot, "POST", "/v1/apps/shop/rotate-key", "")
	var again struct{ Key string }
	if rot.status != 200 || json.Unmarshal([]byte(rot.body), &again) != nil || again.Key == "" || again.Key == made.Key {
		t.Fatalf("rotate: %d %s", rot.status, rot.body)
	}
	a, err := e.c.GetApp(context.Background(), "shop")
	if err != nil || len(a.Keys) != 1 || a.Keys[0].SHA256 != registry.KeyDigest(again.Key) {
		t.Errorf("the stored key is not the rotated one: %+v %v", a, err)
	}
	if r := e.do(boot, "PUT", "/v1/apps/shop/status", `{"status":"disabled"}`); r.status != 200 || !strings.Contains(r.body, `"status":"disabled"`) {
		t.Errorf("disable: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "PUT", "/v1/apps/shop/status", `{"status":"gone"}`); r.status != 400 {
		t.Errorf("a bad status: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "POST", "/v1/apps/nobody/rotate-key", ""); r.status != 404 {
		t.Errorf("rotate a missing app: %d %s", r.status, r.body)
	}
}

// A switch written around Jetway that does not validate is answered as
// the registry's problem (409), and DELETE clears it; the live feed drops
// a batch too big to read and keeps a quiet stream open with keep-alives
// of its own deadline.
func TestAdminReview2(t *testing.T) {
	e := start(t)
	nc := e.nc
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, _ := jetstream.New(nc)
	flags, err := js.KeyValue(ctx, "jetway_flags")
	if err != nil {
		t.Fatal(err)
	}
	rev, err := flags.Put(ctx, "degrade.y", []byte(`{"on":true,"bogus":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if r := e.do(boot, "GET", "/v1/apis/y/degrade", ""); r.status != 409 || r.err.Code != "INVALID_STORED" || r.err.Revision != rev || r.header.Get("ETag") != etagOf(rev) {
		t.Errorf("GET an invalid stored switch: %d %s (it must name revision %d, which clears it)", r.status, r.body, rev)
	}
	if r := e.do(boot, "DELETE", "/v1/apis/y/degrade", "", "If-Match", etagOf(rev)); r.status != 204 {
		t.Errorf("DELETE an invalid stored switch: %d %s", r.status, r.body)
	}

	defer admin.SetLiveTimes(100*time.Millisecond, 50*time.Millisecond)()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/v1/records/stream", nil)
	req.Header.Set("Authorization", "Bearer "+boot)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	_, _ = rd.ReadString('\n')
	big := `[{"api":"a","node":"e1","pass":1,"pad":"` + strings.Repeat("x", 300<<10) + `"}]`
	_ = nc.Publish("jetway.metrics.edge.e1", []byte(big))
	_ = nc.Publish("jetway.metrics.edge.e1", []byte(`[{"api":"a","node":"e1","pass":2}]`))
	keepAlives := 0
	for keepAlives < 3 {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended after a pause: %v", err)
		}
		if strings.HasPrefix(line, "data: ") && !strings.Contains(line, `"pass":2`) {
			t.Errorf("a batch over the bound was delivered: %.80s", line)
		}
		if strings.HasPrefix(line, ": keep-alive") {
			keepAlives++
		}
	}
}

// One token holds at most a few of the live streams: it cannot lock the
// others out.
func TestLiveStreamsPerToken(t *testing.T) {
	e := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := func(token string) int {
		req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/v1/records/stream", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			resp.Body.Close()
		}
		return resp.StatusCode
	}
	for i := range 4 {
		if st := open(boot); st != 200 {
			t.Fatalf("stream %d: %d", i, st)
		}
	}
	if st := open(boot); st != 429 {
		t.Errorf("a fifth stream of one token: %d", st)
	}
	if st := open(e.token("viewer")); st != 200 {
		t.Errorf("another token's stream: %d", st)
	}
}

// Alert rules and an app's grants and limit over REST: rules at their
// revision (a webhook is an admin's to name), grants and limits by
// compare-and-set on the app, refused when they do not validate.
func TestAlertsAndGrants(t *testing.T) {
	e := start(t)
	op := e.token("operator")
	rule := `{"name":"slow","kind":"p99_above","api":"*","latency":"500ms","webhook":"https://ops.example/hook"}`
	if r := e.do(op, "PUT", "/v1/alerts/slow", rule, "If-None-Match", "*"); r.status != 403 {
		t.Errorf("operator writes a rule: %d %s", r.status, r.body)
	}
	put := e.do(boot, "PUT", "/v1/alerts/slow", rule, "If-None-Match", "*")
	if put.status != 200 || put.header.Get("ETag") == "" {
		t.Fatalf("put rule: %d %s", put.status, put.body)
	}
	if r := e.do(boot, "PUT", "/v1/alerts/slow", rule, "If-None-Match", "*"); r.status != 409 {
		t.Errorf("create the rule again: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "PUT", "/v1/alerts/other", rule, "If-None-Match", "*"); r.status != 400 {
		t.Errorf("a rule under another name: %d %s", r.status, r.body)
	}
	if r := e.do(op, "GET", "/v1/alerts", ""); r.status != 200 || !strings.Contains(r.body, `"name":"slow"`) {
		t.Errorf("list rules: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "DELETE", "/v1/alerts/slow", "", "If-Match", `"999"`); r.status != 412 {
		t.Errorf("a stale delete of the rule: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "DELETE", "/v1/alerts/slow", "", "If-Match", put.header.Get("ETag")); r.status != 204 {
		t.Errorf("delete the rule: %d %s", r.status, r.body)
	}

	if r := e.do(boot, "POST", "/v1/apps", `{"id":"shop","apis":["orders.*"]}`); r.status != 201 {
		t.Fatalf("create app: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "PUT", "/v1/apps/shop/apis", `{"apis":["orders.*","users.get"]}`); r.status != 200 || !strings.Contains(r.body, `"users.get"`) {
		t.Errorf("grant: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "PUT", "/v1/apps/shop/apis", `{"apis":["bad name!"]}`); r.status != 400 {
		t.Errorf("an invalid grant: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "PUT", "/v1/apps/shop/rate_limit", `{"limit":100,"window":"1m"}`); r.status != 200 || !strings.Contains(r.body, `"limit":100`) {
		t.Errorf("limit: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "PUT", "/v1/apps/shop/rate_limit", `{"limit":"many"}`); r.status != 400 {
		t.Errorf("a bad limit: %d %s", r.status, r.body)
	}
	if r := e.do(op, "PUT", "/v1/apps/shop/apis", `{"apis":["*"]}`); r.status != 403 {
		t.Errorf("operator grants: %d %s", r.status, r.body)
	}
}

// POST /v1/apis/{name}/test runs the entry's saved cases through the
// node's edge with the key the request gives, and reports each.
func TestAPICasesOverREST(t *testing.T) {
	g := jetwaytest.Start(t)
	g.Publish(`{"name":"cased","pool":"p","route":{"path":"/cased"},"backend":{"type":"mock","json":{"ok":true}},"auth":{"methods":["key"]},
		"cases":[{"name":"ok","request":{"path":"/cased"},"expect":{"status":200,"body":{"/ok":true}}},
		         {"name":"wrong","request":{"path":"/cased"},"expect":{"status":200,"body":{"/ok":false}}}]}`)
	key := g.PutKeyedApp("tester")
	srv := httptest.NewServer(admin.New(admin.Options{Client: g.Client, Bootstrap: boot, EdgeURL: g.URL}).Handler())
	t.Cleanup(srv.Close)
	e := &env{t: t, url: srv.URL, c: g.Client}
	r := e.do(boot, "POST", "/v1/apis/cased/test", `{"key":"`+key+`"}`)
	var res struct {
		Passed, Failed int
		Items          []struct {
			Name     string
			Problems []string
		}
	}
	if r.status != 200 || json.Unmarshal([]byte(r.body), &res) != nil || res.Passed != 1 || res.Failed != 1 || len(res.Items[1].Problems) != 1 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if strings.Contains(r.body, key) {
		t.Errorf("the key is in the answer: %s", r.body)
	}
	if r := e.do(boot, "POST", "/v1/apis/cased/test", ``); r.status != 200 || !strings.Contains(r.body, "status 401") {
		t.Errorf("without a key: %d %s", r.status, r.body)
	}
	if r := e.do(e.token("viewer"), "POST", "/v1/apis/cased/test", ``); r.status != 403 {
		t.Errorf("a viewer tests: %d %s", r.status, r.body)
	}
}

// The release workflow over REST: a draft is written, its cases run
// against that draft revision as a sandbox app, and promote copies it to
// production by compare-and-set, refusing a failing case, a stale
// revision, and a production app's key.
func TestDraftPromoteOverREST(t *testing.T) {
	g := jetwaytest.Start(t)
	g.Publish(`{"name":"greet","pool":"p","route":{"path":"/greet"},"backend":{"type":"mock","json":{"v":1}},"auth":{"methods":["key"]}}`)
	liveKey := g.PutKeyedApp("live")
	sbKey, sbRec, _ := registry.NewAPIKey()
	g.PutApps(&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{sbRec}, APIs: []string{"*"}, Sandbox: true})
	srv := httptest.NewServer(admin.New(admin.Options{Client: g.Client, Bootstrap: boot, EdgeURL: g.URL}).Handler())
	t.Cleanup(srv.Close)
	e := &env{t: t, url: srv.URL, c: g.Client}
	draft := func(v int, want int) string {
		return fmt.Sprintf(`{"name":"greet","pool":"p","route":{"path":"/greet"},"backend":{"type":"mock","json":{"v":%d}},"auth":{"methods":["key"]},
			"cases":[{"name":"v","request":{"path":"/greet"},"expect":{"status":200,"body":{"/v":%d}}}]}`, v, want)
	}

	if r := e.do(boot, "PUT", "/v1/apis/other/draft", draft(2, 2), "If-None-Match", "*"); r.status != 400 {
		t.Fatalf("a draft under another name: %d %s", r.status, r.body)
	}
	r := e.do(boot, "PUT", "/v1/apis/greet/draft", draft(2, 3), "If-None-Match", "*")
	if r.status != 200 {
		t.Fatalf("put draft: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "POST", "/v1/apis/greet/promote", `{"key":"`+sbKey+`"}`); r.status != 409 || !strings.Contains(r.body, "CASES_FAILED") || !strings.Contains(r.body, "/v: 2, want 3") {
		t.Fatalf("a failing case: %d %s", r.status, r.body)
	}
	r = e.do(boot, "PUT", "/v1/apis/greet/draft", draft(2, 2), "If-Match", r.header.Get("ETag"))
	if r.status != 200 {
		t.Fatalf("mend the draft: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "POST", "/v1/apis/greet/promote", `{"key":"`+liveKey+`"}`); r.status != 409 || !strings.Contains(r.body, "not 2") && !strings.Contains(r.body, "answered by draft revision") {
		t.Fatalf("a production app's key tests production, not the draft: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "POST", "/v1/apis/greet/promote", `{"key":"`+sbKey+`","production_revision":99}`); r.status != 412 {
		t.Fatalf("a stale production revision: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "POST", "/v1/apis/greet/promote", `{"key":"`+sbKey+`","draft_revision":1}`); r.status != 412 {
		t.Fatalf("a stale draft revision: %d %s", r.status, r.body)
	}
	if r := e.do(e.token("operator"), "POST", "/v1/apis/greet/promote", `{"key":"`+sbKey+`"}`); r.status != 403 {
		t.Fatalf("an operator promotes: %d %s", r.status, r.body)
	}
	r = e.do(boot, "POST", "/v1/apis/greet/promote", `{"key":"`+sbKey+`"}`)
	var p admin.Promotion
	if r.status != 200 || json.Unmarshal([]byte(r.body), &p) != nil || p.Revision == 0 || len(p.Cases) != 1 || p.Untested {
		t.Fatalf("promote: %d %s", r.status, r.body)
	}
	natstest.CheckFor(t, 3*time.Second, 5*time.Millisecond, func() error {
		if got := g.Do("GET", "/greet", nil, "X-Api-Key", liveKey); got.Body != `{"v":2}` {
			return fmt.Errorf("production answers %d %s", got.Status, got.Body)
		}
		return nil
	})
	if r := e.do(boot, "GET", "/v1/apis/greet/draft", ""); r.status != 404 {
		t.Fatalf("the draft after promote: %d %s", r.status, r.body)
	}
}

// The console's files are served to anyone, under a policy that lets
// scripts come from the console alone and no page frame it; the API it
// reads still needs a token.
func TestConsoleFiles(t *testing.T) {
	srv := httptest.NewServer(admin.Console())
	t.Cleanup(srv.Close)
	r, err := http.Get(srv.URL + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	csp := r.Header.Get("Content-Security-Policy")
	if r.StatusCode != 200 || !strings.Contains(string(b), `<script type="module" src="app.js">`) ||
		!strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe-inline") {
		t.Fatalf("%d csp %q\n%s", r.StatusCode, csp, b)
	}
	for _, f := range []string{"app.js", "chart.js", "style.css", "vendor/ajv2020.min.js"} {
		r, err := http.Get(srv.URL + "/console/" + f)
		if err != nil || r.StatusCode != 200 {
			t.Fatalf("%s: %v %v", f, r, err)
		}
		r.Body.Close()
	}
	e := start(t)
	if r := e.do("", "GET", "/v1/schemas/api", ""); r.status != 401 {
		t.Fatalf("the schema without a token: %d", r.status)
	}
	if r := e.do(e.token("viewer"), "GET", "/v1/schemas/api", ""); r.status != 200 || !strings.Contains(r.body, "2020-12") {
		t.Fatalf("the schema: %d %.200s", r.status, r.body)
	}
	if r := e.do(boot, "PUT", "/v1/apis/x/degrade", `{"on":true}`, "If-None-Match", "*"); r.status != 200 && r.status != 201 {
		t.Fatalf("degrade: %d %s", r.status, r.body)
	}
	if r := e.do(e.token("viewer"), "GET", "/v1/degrade", ""); r.status != 200 || !strings.Contains(r.body, `"api":"x"`) {
		t.Fatalf("degrade list: %d %s", r.status, r.body)
	}
}

// GET /v1/whoami answers any role its token's name, id and role, never
// the token itself; without a token, 401.
func TestWhoami(t *testing.T) {
	e := start(t)
	if r := e.do("", "GET", "/v1/whoami", ""); r.status != 401 {
		t.Errorf("no token: %d", r.status)
	}
	var me admin.Whoami
	if r := e.do(boot, "GET", "/v1/whoami", ""); r.status != 200 || json.Unmarshal([]byte(r.body), &me) != nil ||
		me.Name != "bootstrap-token" || me.Role != registry.RoleAdmin || me.Actor != "bootstrap-token" || strings.Contains(r.body, boot) {
		t.Errorf("bootstrap: %d %s", r.status, r.body)
	}
	for _, role := range []string{"viewer", "operator", "admin"} {
		tok := e.token(role)
		r := e.do(tok, "GET", "/v1/whoami", "")
		me = admin.Whoami{}
		_, rest, _ := strings.Cut(tok, "jwa_")
		id, secret, _ := strings.Cut(rest, "_")
		if r.status != 200 || json.Unmarshal([]byte(r.body), &me) != nil || me.Name != role+"-1" || me.ID != id || me.Role.String() != role ||
			me.Actor != "token:"+role+"-1/"+id || strings.Contains(r.body, secret) || r.header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: %d %s", role, r.status, r.body)
		}
	}
}

// An API entry's backend and channel URLs are read below admin with
// their query values hidden (a partner's key is often one), in the list,
// the entry, a draft and the revisions; an admin, who edits it, reads
// it whole.
func TestEntryURLQueriesHiddenBelowAdmin(t *testing.T) {
	e := start(t)
	viewer, op := e.token("viewer"), e.token("operator")
	doc := `{"name":"partner.get","pool":"p","route":{"path":"/partner/{id}"},"backend":{"type":"http","url":"https://api.partner.example/v1/items/{id}?api_key=s3cr3t&fmt=json"}}`
	chans := `{"name":"partner.set","pool":"p","route":{"path":"/partner-set"},
		"channels":[{"name":"a","backend":{"type":"http","url":"https://a.partner.example/x?token=k3y"}},{"name":"b","backend":{"type":"mock"}}]}`
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, d := range []string{doc, chans} {
		if _, err := e.c.Put(ctx, []byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tok := range []string{viewer, op} {
		for path, want := range map[string]string{"/v1/apis": "token=…", "/v1/apis/partner.get": "https://api.partner.example/v1/items/{id}?api_key=…",
			"/v1/apis/partner.get/revisions": "api_key=…", "/v1/apis/partner.set": "https://a.partner.example/x?token=…"} {
			r := e.do(tok, "GET", path, "")
			if r.status != 200 || strings.Contains(r.body, "s3cr3t") || strings.Contains(r.body, "k3y") || !strings.Contains(r.body, want) {
				t.Errorf("%s: %d %s", path, r.status, r.body)
			}
		}
	}
	if r := e.do(boot, "GET", "/v1/apis", ""); r.status != 200 || !strings.Contains(r.body, "api_key=s3cr3t") || !strings.Contains(r.body, "token=k3y") {
		t.Errorf("admin: %d %s", r.status, r.body)
	}
}

// The values an entry's request rewrites set or add to the backend's
// headers and query (a partner's Authorization, an api_key) are read
// below admin as "…", the names kept, with the backend URL's query hidden
// as well; the sandbox tier's rewrite too. An admin reads them whole.
func TestEntryRewriteValuesHiddenBelowAdmin(t *testing.T) {
	e := start(t)
	viewer, op := e.token("viewer"), e.token("operator")
	doc := `{"name":"partner.rw","pool":"p","route":{"path":"/partner-rw"},
		"backend":{"type":"http","url":"https://api.partner.example/v1?key=urlk3y"},"auth":{"methods":["key"]},
		"rewrite":{"request":{"headers":{"set":{"Authorization":"Bearer hdrs3cr3t"},"add":{"X-Partner-Key":"addk3y"},"remove":["X-Debug"]},
			"query":{"set":{"api_key":"qs3cr3t"},"add":{"src":"jetway"}}},
			"response":{"headers":{"set":{"X-Api-Version":"2"}}}},
		"sandbox":{"backend":{"type":"mock"},"rewrite":{"request":{"headers":{"set":{"Authorization":"Bearer sbs3cr3t"}}}}}}`
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.c.Put(ctx, []byte(doc)); err != nil {
		t.Fatal(err)
	}
	secrets := []string{"urlk3y", "hdrs3cr3t", "addk3y", "qs3cr3t", "sbs3cr3t"}
	for _, tok := range []string{viewer, op} {
		for _, path := range []string{"/v1/apis", "/v1/apis/partner.rw", "/v1/apis/partner.rw/revisions"} {
			r := e.do(tok, "GET", path, "")
			if r.status != 200 || !strings.Contains(r.body, `"Authorization":"…"`) || !strings.Contains(r.body, `"api_key":"…"`) ||
				!strings.Contains(r.body, `"X-Api-Version":"2"`) || !strings.Contains(r.body, `"X-Debug"`) {
				t.Errorf("%s: %d %s", path, r.status, r.body)
			}
			for _, sec := range secrets {
				if strings.Contains(r.body, sec) {
					t.Errorf("%s shows %q below admin: %s", path, sec, r.body)
				}
			}
		}
	}
	r := e.do(boot, "GET", "/v1/apis/partner.rw", "")
	for _, sec := range secrets {
		if r.status != 200 || !strings.Contains(r.body, sec) {
			t.Errorf("admin: %q missing: %d %s", sec, r.status, r.body)
		}
	}
}
