package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/grpcdemo"
)

// TestServeDemoAndCLI runs the quick start (`jetway serve --demo`) and drives
// the registry only through the `jetway api` CLI: put from a file and from
// stdin, a refused invalid entry, list, get, history, rollback and delete,
// each checked on the edge.
func TestServeDemoAndCLI(t *testing.T) {
	t.Parallel()
	srv := startNode(t, "serve", "serve", "", "--demo")
	srv.waitLog(t, startTimeout, `"demo ready"`, func(l logLine) bool { return strings.HasPrefix(l.str("msg"), "demo ready") })
	srv.waitReady(t)
	edge, url := srv.edge, srv.natsURL

	t.Run("demo APIs answer", func(t *testing.T) {
		r := waitStatus(t, edge+"/v1/hello/world", http.StatusOK)
		var hello map[string]string
		if err := json.Unmarshal(r.body, &hello); err != nil || hello["hello"] != "world" {
			t.Errorf("GET /v1/hello/world: %v, want {\"hello\":\"world\"}", r)
		}
		if hello["request_id"] == "" || hello["request_id"] != r.header.Get("X-Request-Id") {
			t.Errorf("backend saw request id %q, caller got %q", hello["request_id"], r.header.Get("X-Request-Id"))
		}

		r = get(t, edge+"/v1/mock")
		if r.status != http.StatusOK || string(r.body) != `{"ok":true,"source":"mock"}` {
			t.Errorf("GET /v1/mock: %v", r)
		}

		r, err := do(http.MethodPost, edge+"/v1/echo", strings.NewReader("ping pong"), http.Header{"Content-Type": {"text/x-e2e"}})
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusOK || string(r.body) != "ping pong" || r.header.Get("Content-Type") != "text/x-e2e" {
			t.Errorf("POST /v1/echo: %v, Content-Type %q", r, r.header.Get("Content-Type"))
		}

		// The gRPC demo: JSON in, the test service's message out.
		r, err = do(http.MethodPost, edge+"/v1/grpc/echo", strings.NewReader(`{"payload":{"body":"aGk="}}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"aGk="`) || !strings.Contains(string(r.body), "jetway-demo") {
			t.Errorf("POST /v1/grpc/echo: %v", r)
		}
		r, err = do(http.MethodPost, edge+"/v1/grpc/stream", strings.NewReader(`{"responseParameters":[{"size":1},{"size":2}]}`), http.Header{"Accept": {"application/x-ndjson"}})
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusOK || strings.Count(string(r.body), "\n") != 2 {
			t.Errorf("POST /v1/grpc/stream: %v", r)
		}
		// The NATS demo: a micro service on the embedded NATS.
		r, err = do(http.MethodPost, edge+"/v1/nats/greet", strings.NewReader("ada"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"hello":"ada"`) {
			t.Errorf("POST /v1/nats/greet: %v", r)
		}
		if r, _ = do(http.MethodPost, edge+"/v1/nats/greet", nil, nil); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "send a name") {
			t.Errorf("POST /v1/nats/greet without a name: %v", r)
		}

		// A backend's own error passes through, not as a gateway error.
		r = get(t, edge+"/v1/status/418")
		if r.status != 418 || r.gwErr().Code != "" {
			t.Errorf("GET /v1/status/418: %v, want the backend's own 418", r)
		}

		// The README's validation and cache lines.
		r, err = do(http.MethodPost, edge+"/v1/orders", strings.NewReader(`{"item":"Tea!","quantity":0}`), http.Header{"Content-Type": {"application/json"}})
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusBadRequest || r.gwErr().Code != "INVALID_REQUEST" || !strings.Contains(string(r.body), "quantity is a whole number") || !strings.Contains(string(r.body), `"/body/item"`) {
			t.Errorf("POST /v1/orders, invalid: %v", r)
		}
		r, _ = do(http.MethodPost, edge+"/v1/orders", strings.NewReader(`{"item":"tea","quantity":2}`), http.Header{"Content-Type": {"application/json"}})
		if r.status != http.StatusOK {
			t.Errorf("POST /v1/orders, valid: %v", r)
		}
		if r = get(t, edge+"/v1/cached/ada"); r.status != http.StatusOK || r.header.Get("X-Cache") != "miss" {
			t.Errorf("GET /v1/cached/ada, first: %v X-Cache %q", r, r.header.Get("X-Cache"))
		}
		if r = get(t, edge+"/v1/cached/ada"); r.header.Get("X-Cache") != "hit" {
			t.Errorf("GET /v1/cached/ada, again: X-Cache %q", r.header.Get("X-Cache"))
		}
		// The README's async call: 202, then the job succeeds with the report.
		loc := submitJob(t, edge+"/v1/report", "march", nil)
		if j := waitJobState(t, edge+loc, "succeeded", 10*time.Second, nil); j.Result == nil || j.Result.Body == nil || !strings.Contains(*j.Result.Body, `"report":"march"`) {
			t.Errorf("the demo report job: %+v", j)
		}
		// The demo's saved cases pass through the real edge.
		if res := jetway(t, "", "api", "test", "demo.orders", "--edge", edge, "--nats", url); res.code != 0 || !strings.Contains(res.stdout, "2 of 2 cases passed") {
			t.Errorf("api test: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		// jetway cache purge reaches the serve process's edge.
		if res := jetway(t, "", "cache", "purge", "demo.cached", "/v1/cached/ada", "--nats", url); res.code != 0 || !strings.Contains(res.stdout, "1 dropped on 1 edges") {
			t.Errorf("cache purge: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		if r = get(t, edge+"/v1/cached/ada"); r.header.Get("X-Cache") != "miss" {
			t.Errorf("GET /v1/cached/ada after purge: X-Cache %q", r.header.Get("X-Cache"))
		}
		// jetway fault on and off, live on the edge.
		if res := jetway(t, "", "fault", "on", "demo.mock", "--abort", "503", "--reason", "e2e drill", "--nats", url); res.code != 0 {
			t.Fatalf("fault on: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		waitStatus(t, edge+"/v1/mock", http.StatusServiceUnavailable)
		if res := jetway(t, "", "fault", "off", "demo.mock", "--nats", url); res.code != 0 {
			t.Fatalf("fault off: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		waitStatus(t, edge+"/v1/mock", http.StatusOK)
	})

	t.Run("a gRPC schema pinned in the registry", func(t *testing.T) {
		pb := filepath.Join(t.TempDir(), "testing.pb")
		if err := os.WriteFile(pb, grpcdemo.DescriptorSet(), 0o644); err != nil {
			t.Fatal(err)
		}
		res := jetway(t, "", "schema", "put", pb, "--nats", url)
		m := regexp.MustCompile(`stored schema (sha256:[0-9a-f]{64})`).FindStringSubmatch(res.stdout)
		if res.code != 0 || m == nil || !strings.Contains(res.stdout, "grpc.testing.TestService") {
			t.Fatalf("schema put: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		if res := jetway(t, "", "schema", "list", "--nats", url); res.code != 0 || !strings.Contains(res.stdout, m[1]) {
			t.Fatalf("schema list: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		// The demo's gRPC server, with the schema from the registry.
		var target string
		for _, l := range srv.output() {
			if i := strings.Index(l, `"grpc_backend":"`); i >= 0 {
				target = strings.SplitN(l[i+len(`"grpc_backend":"`):], `"`, 2)[0]
			}
		}
		doc := `{"name":"e2e.pinned","pool":"e2e","route":{"method":"POST","path":"/v1/e2e/pinned"},"timeout":"2s",
			"backend":{"type":"grpc","target":"` + target + `","method":"grpc.testing.TestService/UnaryCall","schema":"` + m[1] + `"}}`
		putAPI(t, url, doc)
		var r response
		natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error { // until the edge routes it
			var err error
			r, err = do(http.MethodPost, edge+"/v1/e2e/pinned", strings.NewReader(`{"responseSize":1}`), nil)
			if err != nil || r.status == http.StatusNotFound {
				return fmt.Errorf("POST /v1/e2e/pinned: %v %v", r, err)
			}
			return nil
		})
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"eA=="`) {
			t.Fatalf("POST /v1/e2e/pinned: %v", r)
		}
		// A method the pinned schema lacks is refused at publish.
		bad := strings.Replace(doc, "/UnaryCall", "/NoSuchCall", 1)
		if res := jetway(t, bad, "api", "put", "-", "--nats", url); res.code == 0 || !strings.Contains(res.stderr, "has no method NoSuchCall") {
			t.Fatalf("api put with a method the schema lacks: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
	})

	t.Run("import a NATS micro service as drafts", func(t *testing.T) {
		res := jetway(t, "", "api", "import-micro", "demo-greeter", "--dry-run", "--nats", url)
		if res.code != 0 || !strings.Contains(res.stdout, `"subject":"svc.demo.greet"`) {
			t.Fatalf("import-micro --dry-run: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		if res := jetway(t, "", "api", "get", "demo-greeter.default", "--draft", "--nats", url); res.code == 0 {
			t.Fatalf("--dry-run wrote the draft:\n%s", res.stdout)
		}
		res = jetway(t, "", "api", "import-micro", "demo-greeter", "--nats", url)
		if res.code != 0 || !strings.Contains(res.stdout, "wrote draft.demo-greeter.default (POST /svc/demo-greeter/default -> svc.demo.greet, sandbox apps only)") {
			t.Fatalf("import-micro: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		// Again: the draft exists and is not overwritten.
		if res := jetway(t, "", "api", "import-micro", "demo-greeter", "--nats", url); res.code != 0 || !strings.Contains(res.stderr, "exists; not overwritten") {
			t.Fatalf("import-micro twice: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		if res := jetway(t, "", "api", "import-micro", "no-such-service", "--nats", url); res.code == 0 || !strings.Contains(res.stderr, "no NATS service") {
			t.Fatalf("import-micro of nothing: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		key := func(args ...string) string {
			res := jetway(t, "", append([]string{"app", "create"}, append(args, "--api", "demo-greeter.*", "--nats", url)...)...)
			m := keyRE.FindStringSubmatch(res.stdout)
			if res.code != 0 || m == nil {
				t.Fatalf("app create %v: exit %d\n%s%s", args, res.code, res.stdout, res.stderr)
			}
			return m[1]
		}
		sandboxKey, prodKey := key("draft-tester", "--sandbox"), key("draft-prod")
		call := func(k string) response {
			var r response
			deadline := time.Now().Add(5 * time.Second)
			for {
				var err error
				r, err = do(http.MethodPost, edge+"/svc/demo-greeter/default", strings.NewReader("grace"), http.Header{"X-Api-Key": {k}})
				if err == nil && r.status != http.StatusNotFound && r.status != http.StatusUnauthorized || time.Now().After(deadline) {
					return r
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		if r := call(sandboxKey); r.status != http.StatusOK || !strings.Contains(string(r.body), `"hello":"grace"`) {
			t.Errorf("a sandbox app calls the draft: %v", r)
		}
		post := func(k string) response {
			r, err := do(http.MethodPost, edge+"/svc/demo-greeter/default", strings.NewReader("grace"), http.Header{"X-Api-Key": {k}})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		if r := post(prodKey); r.status != http.StatusNotFound {
			t.Errorf("a production app calls the draft: %v", r)
		}
		// The draft has no saved cases: promote refuses, unless told to
		// skip them; then production apps have the API.
		if res := jetway(t, "", "api", "promote", "demo-greeter.default", "--edge", edge, "--key", sandboxKey, "--nats", url); res.code == 0 || !strings.Contains(res.stderr, "no saved cases") {
			t.Fatalf("promote without cases: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		res = jetway(t, "", "api", "promote", "demo-greeter.default", "--skip-cases", "--nats", url)
		if res.code != 0 || !strings.Contains(res.stdout, "promoted the draft of demo-greeter.default") || !strings.Contains(res.stdout, "untested") {
			t.Fatalf("promote --skip-cases: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		if r := call(prodKey); r.status != http.StatusOK || !strings.Contains(string(r.body), `"hello":"grace"`) {
			t.Errorf("a production app after promote: %v", r)
		}
		if res := jetway(t, "", "api", "get", "demo-greeter.default", "--draft", "--nats", url); res.code == 0 {
			t.Errorf("the draft is still there after promote:\n%s", res.stdout)
		}
	})

	t.Run("put from a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "e2e-file.json")
		doc := entry("e2e.file", "e2e", "GET", "/v1/e2e/file", mockBackend("from-file"), nil)
		if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		res := jetway(t, "", "api", "put", file, "--nats", url)
		if res.code != 0 || !strings.Contains(res.stdout, "published e2e.file") {
			t.Fatalf("api put %s: exit %d\n%s%s", file, res.code, res.stdout, res.stderr)
		}
		waitBody(t, edge+"/v1/e2e/file", "from-file")
	})

	t.Run("put YAML from stdin", func(t *testing.T) {
		doc := `
name: e2e.stdin
pool: e2e-other
route:
  method: GET
  path: /v1/e2e/stdin/{id}
backend:
  type: mock
  status: 201
  json: {via: stdin}
timeout: 2s
`
		putAPI(t, url, doc)
		r := waitStatus(t, edge+"/v1/e2e/stdin/7", http.StatusCreated)
		if string(r.body) != `{"via":"stdin"}` || r.header.Get("Content-Type") != "application/json" {
			t.Errorf("GET /v1/e2e/stdin/7: %v, Content-Type %q", r, r.header.Get("Content-Type"))
		}
	})

	t.Run("invalid entry is refused and not written", func(t *testing.T) {
		doc := `
name: e2e.bad
pool: e2e
route:
  method: GET
  path: v1/e2e/bad
backend:
  type: http
  url: ftp://127.0.0.1/bad
timeout: 10m
concurrency: 0
`
		res := jetway(t, doc, "api", "put", "-", "--nats", url)
		if res.code == 0 {
			t.Fatalf("api put of an invalid entry exited 0:\n%s%s", res.stdout, res.stderr)
		}
		for _, want := range []string{
			"nothing was written",
			`route.path: must start with "/"`,
			"backend.url: must be an http:// or https:// URL",
			"timeout: must be between",
			"concurrency:",
		} {
			if !strings.Contains(res.stderr, want) {
				t.Errorf("api put stderr lacks %q:\n%s", want, res.stderr)
			}
		}
		kv := kvBucket(t, url)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if e, err := kv.Get(ctx, "e2e.bad"); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("key e2e.bad after a refused put: entry %v, err %v; want ErrKeyNotFound", e, err)
		}
		if res := jetway(t, "", "api", "get", "e2e.bad", "--nats", url); res.code == 0 || !strings.Contains(res.stderr, "not found") {
			t.Errorf("api get e2e.bad: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
	})

	t.Run("list get history rollback delete", func(t *testing.T) {
		route := edge + "/v1/e2e/rev"
		rev1 := putAPI(t, url, entry("e2e.rev", "e2e", "GET", "/v1/e2e/rev", mockBackend("one"), nil))
		waitBody(t, route, "one")
		rev2 := putAPI(t, url, entry("e2e.rev", "e2e", "GET", "/v1/e2e/rev", mockBackend("two"), nil))
		if rev2 <= rev1 {
			t.Fatalf("second put at revision %d, first at %d", rev2, rev1)
		}
		waitBody(t, route, "two")

		res := jetway(t, "", "api", "list", "--nats", url)
		if res.code != 0 {
			t.Fatalf("api list: exit %d\n%s", res.code, res.stderr)
		}
		for _, name := range []string{"demo.hello", "demo.mock", "e2e.rev", "e2e.stdin"} {
			if !strings.Contains(res.stdout, name) {
				t.Errorf("api list lacks %s:\n%s", name, res.stdout)
			}
		}
		if strings.Contains(res.stdout, "e2e.bad") {
			t.Errorf("api list shows the refused entry:\n%s", res.stdout)
		}

		res = jetway(t, "", "api", "get", "e2e.rev", "--nats", url)
		var got struct {
			Name    string `json:"name"`
			Backend struct {
				Body string `json:"body"`
			} `json:"backend"`
		}
		if res.code != 0 || json.Unmarshal([]byte(res.stdout), &got) != nil || got.Name != "e2e.rev" || got.Backend.Body != "two" {
			t.Errorf("api get e2e.rev: exit %d, %q, want the second entry as JSON", res.code, res.stdout)
		}

		res = jetway(t, "", "api", "history", "e2e.rev", "--nats", url)
		if res.code != 0 {
			t.Fatalf("api history: exit %d\n%s", res.code, res.stderr)
		}
		revs := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(res.stdout), "\n")[1:] {
			if f := strings.Fields(line); len(f) > 1 {
				revs[f[0]] = true
			}
		}
		for _, rev := range []uint64{rev1, rev2} {
			if !revs[strconv.FormatUint(rev, 10)] {
				t.Errorf("api history lacks revision %d:\n%s", rev, res.stdout)
			}
		}

		res = jetway(t, "", "api", "rollback", "e2e.rev", strconv.FormatUint(rev1, 10), "--nats", url)
		if res.code != 0 {
			t.Fatalf("api rollback: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		waitBody(t, route, "one")

		res = jetway(t, "", "api", "delete", "e2e.rev", "--nats", url)
		if res.code != 0 {
			t.Fatalf("api delete: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		deleted := time.Now()
		// Contract: live on every edge within 100ms at p99, measured by
		// bench (BenchmarkRegistryPropagation); here it must happen, and the time is
		// logged.
		var last response
		natstest.CheckFor(t, applyTimeout, pollEvery, func() error {
			last = get(t, route)
			if last.status != http.StatusNotFound {
				return fmt.Errorf("GET %s after delete: %v", route, last)
			}
			return nil
		})
		t.Logf("delete live on the edge %v after the CLI returned", time.Since(deleted).Round(time.Millisecond))
		wantError(t, last, http.StatusNotFound, "ROUTE_NOT_FOUND")
		if res := jetway(t, "", "api", "get", "e2e.rev", "--nats", url); res.code == 0 {
			t.Errorf("api get after delete exited 0: %s", res.stdout)
		}
	})

	t.Run("degrade on and off", func(t *testing.T) {
		res := jetway(t, "", "degrade", "on", "demo.hello", "--reason", "e2e drill", "--nats", url)
		if res.code != 0 || !strings.Contains(res.stdout, "degraded demo.hello") {
			t.Fatalf("degrade on: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		start := time.Now() // the switch is written: from here it must reach the edge
		r := waitStatus(t, edge+"/v1/hello/world", http.StatusServiceUnavailable)
		t.Logf("degrade live on the edge %v after the CLI returned", time.Since(start).Round(time.Millisecond))
		wantError(t, r, http.StatusServiceUnavailable, "DEGRADED")
		if !strings.Contains(string(r.body), "e2e drill") {
			t.Errorf("degraded answer %s does not give the reason", r.body)
		}
		res = jetway(t, "", "degrade", "list", "--nats", url)
		if res.code != 0 || !strings.Contains(res.stdout, "demo.hello") || !strings.Contains(res.stdout, "on") {
			t.Errorf("degrade list: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		res = jetway(t, "", "degrade", "on", "demo.mock", "--status", "42", "--nats", url)
		if res.code == 0 || !strings.Contains(res.stderr, "status") {
			t.Errorf("degrade on with status 42: exit %d\n%s", res.code, res.stderr)
		}
		// A typo or a --cached that cannot work is refused, not silently
		// written; --ahead writes it all the same.
		res = jetway(t, "", "degrade", "on", "demo.nosuch", "--nats", url)
		if res.code == 0 || !strings.Contains(res.stderr, "api demo.nosuch is not published") {
			t.Errorf("degrade on an unpublished API: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		res = jetway(t, "", "degrade", "on", "demo.mock", "--cached", "--nats", url)
		if res.code == 0 || !strings.Contains(res.stderr, "keeps no cached answers") {
			t.Errorf("degrade on --cached without a cache: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		if res = jetway(t, "", "degrade", "list", "--nats", url); strings.Contains(res.stdout, "demo.nosuch") || strings.Contains(res.stdout, "demo.mock") {
			t.Errorf("a refused switch was written:\n%s", res.stdout)
		}
		res = jetway(t, "", "degrade", "on", "demo.nosuch", "--ahead", "--nats", url)
		if res.code != 0 {
			t.Errorf("degrade on --ahead: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		jetway(t, "", "degrade", "off", "demo.nosuch", "--nats", url)
		if res := jetway(t, "", "degrade", "off", "demo.hello", "--nats", url); res.code != 0 {
			t.Fatalf("degrade off: exit %d\n%s", res.code, res.stderr)
		}
		waitStatus(t, edge+"/v1/hello/world", http.StatusOK)
	})

	t.Run("the admin REST API with the token serve made", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(srv.data, "admin-token"))
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(filepath.Join(srv.data, "admin-token")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("admin-token file mode: %v %v", fi.Mode(), err)
		}
		auth := http.Header{"Authorization": {"Bearer " + strings.TrimSpace(string(b))}}
		if r, _ := do(http.MethodGet, srv.admin+"/v1/apis", nil, nil); r.status != http.StatusUnauthorized {
			t.Errorf("GET /v1/apis without a token: %v", r)
		}
		r, err := do(http.MethodGet, srv.admin+"/v1/apis/demo.hello", nil, auth)
		if err != nil || r.status != http.StatusOK || r.header.Get("ETag") == "" {
			t.Fatalf("GET /v1/apis/demo.hello: %v %v", r, err)
		}
		// A degrade switch flipped over REST changes what the edge answers.
		create := http.Header{"Authorization": auth["Authorization"], "If-None-Match": {"*"}}
		r, _ = do(http.MethodPut, srv.admin+"/v1/apis/demo.mock/degrade", strings.NewReader(`{"on":true,"status":503,"reason":"e2e over REST"}`), create)
		if r.status != http.StatusOK {
			t.Fatalf("PUT degrade: %v", r)
		}
		waitStatus(t, edge+"/v1/mock", http.StatusServiceUnavailable)
		del := http.Header{"Authorization": auth["Authorization"], "If-Match": {r.header.Get("ETag")}}
		if r, _ := do(http.MethodDelete, srv.admin+"/v1/apis/demo.mock/degrade", nil, del); r.status != http.StatusNoContent {
			t.Fatalf("DELETE degrade: %v", r)
		}
		waitStatus(t, edge+"/v1/mock", http.StatusOK)
		if res := jetway(t, "", "audit", "--kind", "degrade", "--nats", url); res.code != 0 || !strings.Contains(res.stdout, "bootstrap-token") {
			t.Errorf("jetway audit: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
	})

	t.Run("SIGTERM stops serve cleanly", func(t *testing.T) {
		from := srv.mark()
		srv.signal(t, syscall.SIGTERM)
		if code := srv.waitExit(t, exitTimeout); code != 0 {
			t.Errorf("serve exited %d after SIGTERM, want 0", code)
		}
		// A clean shutdown warns of nothing (it used to log the registry
		// watch as interrupted and NATS errors on closed pipes).
		for _, l := range srv.output()[from:] {
			if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
				t.Errorf("shutdown logged: %s", l)
			}
		}
	})
}
