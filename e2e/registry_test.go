package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// TestInvalidKVEntryKeepsLastGood writes invalid entries straight into the
// jetway_apis bucket (as `nats kv put` would) for an API that already has a
// good version: every node logs the key and the reason, the last good
// version keeps serving, other APIs are untouched, and the next valid entry
// is applied. An edge that starts while the newest value is invalid falls
// back to the last good revision from the key's history.
func TestInvalidKVEntryKeepsLastGood(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	edge := c.startEdge(t, "edge")
	worker := c.startWorker(t, "worker", "kv")

	putAPI(t, c.url, entry("kv.target", "kv", "GET", "/v1/kv/target", mockBackend("good-1"), nil))
	putAPI(t, c.url, entry("kv.other", "kv", "GET", "/v1/kv/other", mockBackend("other"), nil))
	waitBody(t, edge.edge+"/v1/kv/target", "good-1")
	waitBody(t, edge.edge+"/v1/kv/other", "other")

	kv := kvBucket(t, c.url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	bad := []struct {
		what, value, reason string
	}{
		{"bad JSON", `{"name":"kv.target","pool":`, "JSON"},
		{"schema violation", `{"name":"kv.target","pool":"kv","route":{"method":"GET","path":"v1/kv/target"},"backend":{"type":"ftp"}}`, "route.path"},
		// A valid entry under another API's key must not take it over.
		{"name differs from key", entry("kv.other", "kv", "GET", "/v1/kv/target", mockBackend("hijack"), nil), "name"},
	}
	for _, b := range bad {
		edgeMark, workerMark := edge.mark(), worker.mark()
		rev, err := kv.Put(ctx, "kv.target", []byte(b.value))
		if err != nil {
			t.Fatalf("kv put (%s): %v", b.what, err)
		}
		for _, n := range []*node{edge, worker} {
			from := edgeMark
			if n == worker {
				from = workerMark
			}
			l := n.waitLogFrom(t, from, applyTimeout, "a warning about key kv.target ("+b.what+")", func(l logLine) bool {
				return l.str("level") == "WARN" && l.str("key") == "kv.target" && l.str("revision") == fmt.Sprint(rev)
			})
			if !strings.Contains(l.str("reason"), b.reason) {
				t.Errorf("%s: warning for %s has reason %q, want it to mention %q", n.name, b.what, l.str("reason"), b.reason)
			}
			if !strings.Contains(l.str("msg"), "invalid") {
				t.Errorf("%s: warning for %s says %q", n.name, b.what, l.str("msg"))
			}
		}
		// The node has processed the entry: the last good version serves.
		if r := get(t, edge.edge+"/v1/kv/target"); r.status != http.StatusOK || string(r.body) != "good-1" {
			t.Errorf("after %s: GET /v1/kv/target = %v, want the last good version", b.what, r)
		}
		if r := get(t, edge.edge+"/v1/kv/other"); r.status != http.StatusOK || string(r.body) != "other" {
			t.Errorf("after %s: GET /v1/kv/other = %v", b.what, r)
		}
	}

	// A node that starts now only finds an invalid newest value.
	late := c.startEdge(t, "late-edge")
	waitBody(t, late.edge+"/v1/kv/target", "good-1")

	// The CLI shows what is in force, and that a newer invalid revision
	// exists, with its problems.
	res := jetway(t, "", "api", "get", "kv.target", "--nats", c.url)
	if res.code != 0 || !strings.Contains(res.stdout, "good-1") || !strings.Contains(res.stderr, "is invalid and not served") || !strings.Contains(res.stderr, "name") {
		t.Errorf("api get kv.target: exit %d\nstdout %s\nstderr %s\nwant the good-1 entry in force and the invalid newest revision named", res.code, res.stdout, res.stderr)
	}
	res = jetway(t, "", "api", "list", "--nats", c.url)
	if line := lineWith(res.stdout, "kv.target"); res.code != 0 || strings.Contains(line, "invalid entry") || !strings.Contains(line, "/v1/kv/target") || !strings.Contains(line, "is invalid, not served") {
		t.Errorf("api list: exit %d, row %q, want the route in force and a note on the invalid newest revision\n%s", res.code, line, res.stdout)
	}
	res = jetway(t, "", "api", "history", "kv.target", "--nats", c.url)
	if res.code != 0 || !strings.Contains(res.stdout, "(created)") || !strings.Contains(res.stdout, "backend.body") {
		t.Errorf("api history: exit %d, want what each revision changed\n%s", res.code, res.stdout)
	}

	// A valid entry written straight into KV is applied like `api put`.
	if _, err := kv.Put(ctx, "kv.target", []byte(entry("kv.target", "kv", "GET", "/v1/kv/target", mockBackend("good-2"), nil))); err != nil {
		t.Fatal(err)
	}
	waitBody(t, edge.edge+"/v1/kv/target", "good-2")
	waitBody(t, late.edge+"/v1/kv/target", "good-2")
	waitBody(t, edge.edge+"/v1/kv/other", "other")
}

// lineWith returns the first line of s that contains sub.
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// TestNATSUnreachableAtStart checks the local snapshot: an edge and a worker
// that ran once keep the last good registry in --data; started again while
// NATS is down they come up from it (healthz 200, readyz 503 saying so),
// and once NATS is back on the same address they reconnect, turn ready and
// serve.
func TestNATSUnreachableAtStart(t *testing.T) {
	t.Parallel()
	be := newBackend(t, func(_ *backend, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "item %s", strings.TrimPrefix(r.URL.Path, "/items/"))
	})

	opts := natstest.DefaultOptions(t)
	opts.Port = natstest.FreePort(t)
	ns := natstest.RunServerWithOptions(t, opts)
	url := ns.ClientURL()
	edgeData, workerData := t.TempDir(), t.TempDir()

	edge := startNode(t, "edge-1", "edge", edgeData, "--nats", url)
	worker := startNode(t, "worker-1", "worker", workerData, "--nats", url, "--pool", "snap")
	edge.waitReady(t)
	worker.waitReady(t)
	putAPI(t, url, entry("snap.items", "snap", "GET", "/v1/snap/{id}", httpBackend(be.URL+"/items/{id}"), map[string]any{"timeout": "2s"}))
	waitBody(t, edge.edge+"/v1/snap/42", "item 42")

	for _, f := range []string{filepath.Join(edgeData, "registry-edge.json"), filepath.Join(workerData, "registry-worker.json")} {
		natstest.CheckFor(t, applyTimeout, pollEvery, func() error {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			var snap struct {
				APIs map[string]json.RawMessage `json:"apis"`
			}
			if err := json.Unmarshal(b, &snap); err != nil {
				return fmt.Errorf("%s: %v", f, err)
			}
			if _, ok := snap.APIs["snap.items"]; !ok {
				return fmt.Errorf("%s has no snap.items yet", f)
			}
			return nil
		})
	}

	for _, n := range []*node{edge, worker} {
		n.signal(t, syscall.SIGTERM)
		if code := n.waitExit(t, exitTimeout); code != 0 {
			t.Errorf("%s exited %d after SIGTERM", n.name, code)
		}
	}
	ns.Shutdown()
	ns.WaitForShutdown()

	// NATS is down: both nodes start from their snapshot.
	edge = startNode(t, "edge-2", "edge", edgeData, "--nats", url)
	worker = startNode(t, "worker-2", "worker", workerData, "--nats", url, "--pool", "snap")
	for _, n := range []*node{edge, worker} {
		if r := get(t, n.admin+"/healthz"); r.status != http.StatusOK {
			t.Errorf("%s /healthz with NATS down: %v", n.name, r)
		}
		natstest.CheckFor(t, startTimeout, pollEvery, func() error {
			st, rz, err := n.readyz()
			if err != nil {
				return err
			}
			if st != http.StatusServiceUnavailable || !strings.Contains(rz.Reason, "local snapshot") || rz.Registry.Source != "file" || rz.Registry.APIs != 1 {
				return fmt.Errorf("%s /readyz with NATS down: %d %+v", n.name, st, rz)
			}
			return nil
		})
	}
	if _, rz, _ := edge.readyz(); rz.Routes != 1 {
		t.Errorf("edge routes from the snapshot: %d, want 1", rz.Routes)
	}
	if _, rz, _ := worker.readyz(); !contains(rz.Serving, "snap.items") {
		t.Errorf("worker serves %v from the snapshot, want snap.items", rz.Serving)
	}
	// The route is known from the snapshot; the call fails fast as a
	// gateway error (the bus is down), never as an unknown route.
	if r := get(t, edge.edge+"/v1/snap/1"); r.status != http.StatusServiceUnavailable || r.gwErr().Code != "BUS_UNAVAILABLE" || r.took > time.Second {
		t.Errorf("call with NATS down: %v, want 503 BUS_UNAVAILABLE at once", r)
	}

	// NATS returns on the same address with the same store.
	opts2 := natstest.DefaultOptions(t)
	opts2.Port, opts2.StoreDir = opts.Port, opts.StoreDir
	natstest.RunServerWithOptions(t, opts2)
	back := time.Now()
	edge.waitReady(t)
	worker.waitReady(t)
	waitBody(t, edge.edge+"/v1/snap/7", "item 7")
	t.Logf("edge and worker ready and serving %v after NATS came back", time.Since(back).Round(time.Millisecond))

	// They follow the registry live again.
	putAPI(t, url, entry("snap.items", "snap", "GET", "/v1/snap/v2/{id}", httpBackend(be.URL+"/items/{id}"), map[string]any{"timeout": "2s"}))
	waitBody(t, edge.edge+"/v1/snap/v2/8", "item 8")
	waitStatus(t, edge.edge+"/v1/snap/8", http.StatusNotFound)
}

// TestRegistryCatchesUpAfterNATSRestart restarts NATS (same address, same
// store) under a running edge and worker: once they have reconnected and
// say they are ready, a registry change must be applied as promptly as
// before the outage (the watcher re-watches on reconnect instead of waiting
// for its ordered consumer's missed heartbeats, which took ~15-20 s).
func TestRegistryCatchesUpAfterNATSRestart(t *testing.T) {
	t.Parallel()
	opts := natstest.DefaultOptions(t)
	opts.Port = natstest.FreePort(t)
	ns := natstest.RunServerWithOptions(t, opts)
	c := &cluster{ns: ns, url: ns.ClientURL()}
	edge := c.startEdge(t, "edge")
	worker := c.startWorker(t, "worker", "restart")
	putAPI(t, c.url, entry("restart.a", "restart", "GET", "/v1/restart/a", mockBackend("a1"), nil))
	waitBody(t, edge.edge+"/v1/restart/a", "a1")

	ns.Shutdown()
	ns.WaitForShutdown()
	for _, n := range []*node{edge, worker} {
		natstest.CheckFor(t, startTimeout, pollEvery, func() error {
			if st, rz, err := n.readyz(); err != nil || st != http.StatusServiceUnavailable {
				return fmt.Errorf("%s /readyz with NATS down: %d %+v %v", n.name, st, rz, err)
			}
			return nil
		})
	}

	opts2 := natstest.DefaultOptions(t)
	opts2.Port, opts2.StoreDir = opts.Port, opts.StoreDir
	natstest.RunServerWithOptions(t, opts2)
	edge.waitReady(t)
	worker.waitReady(t)
	ready := time.Now()
	putAPI(t, c.url, entry("restart.a", "restart", "GET", "/v1/restart/a", mockBackend("a2"), nil))
	putAPI(t, c.url, entry("restart.b", "restart", "GET", "/v1/restart/b", mockBackend("b1"), nil))
	waitBody(t, edge.edge+"/v1/restart/a", "a2")
	waitBody(t, edge.edge+"/v1/restart/b", "b1")
	t.Logf("changes live %v after the nodes said ready", time.Since(ready).Round(time.Millisecond))
}

// TestRouteHolderKeepsRoute is issue 17's scenario with the real binary:
// demo.hello owns GET /v1/hello/{name}; `api put` of dup.hello on
// /v1/hello/{x} is refused naming the holder; written straight into KV it
// is not routed; then editing only demo.hello's timeout, rolling it back
// and restarting the node each leave /v1/hello/world answering from
// demo.hello.
func TestRouteHolderKeepsRoute(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	srv := startNode(t, "serve", "serve", data, "--demo")
	srv.waitLog(t, startTimeout, `"demo ready"`, func(l logLine) bool { return strings.HasPrefix(l.str("msg"), "demo ready") })
	srv.waitReady(t)
	fromDemo := func(t *testing.T, what string) {
		t.Helper()
		r := waitStatus(t, srv.edge+"/v1/hello/world", http.StatusOK)
		var hello map[string]string
		if err := json.Unmarshal(r.body, &hello); err != nil || hello["hello"] != "world" {
			t.Fatalf("%s: GET /v1/hello/world = %v, want demo.hello's greeting", what, r)
		}
	}
	fromDemo(t, "at start")

	dup := entry("dup.hello", "demo", "GET", "/v1/hello/{x}", mockBackend("dup"), nil)
	res := jetway(t, dup, "api", "put", "-", "--nats", srv.natsURL)
	if res.code == 0 || !strings.Contains(res.stderr, "held by api demo.hello") || !strings.Contains(res.stderr, "nothing was written") {
		t.Fatalf("api put of dup.hello: exit %d\nstdout: %s\nstderr: %s\nwant a refusal naming demo.hello", res.code, res.stdout, res.stderr)
	}
	if res := jetway(t, "", "api", "get", "dup.hello", "--nats", srv.natsURL); res.code == 0 {
		t.Fatalf("the refused dup.hello was written: %s", res.stdout)
	}

	// conflictLogged waits for the edge to log, after mark, that dup.hello
	// is not routed because demo.hello holds the route.
	conflictLogged := func(t *testing.T, mark int, what string) {
		t.Helper()
		l := srv.waitLogFrom(t, mark, applyTimeout, "a route conflict ("+what+")", msgIs("route conflict; api not routed"))
		if l.str("api") != "dup.hello" || l.str("held_by") != "demo.hello" {
			t.Fatalf("%s: logged %v, want dup.hello not routed, held by demo.hello", what, l)
		}
	}
	mark := srv.mark()
	kv := kvBucket(t, srv.natsURL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kv.Put(ctx, "dup.hello", []byte(dup)); err != nil {
		t.Fatal(err)
	}
	conflictLogged(t, mark, "dup.hello written into KV")
	fromDemo(t, "dup.hello written into KV")

	// Edit only the timeout, as a user does: get, change, put.
	res = jetway(t, "", "api", "get", "demo.hello", "--nats", srv.natsURL)
	if res.code != 0 {
		t.Fatalf("api get: %d %s", res.code, res.stderr)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(res.stdout), &doc); err != nil {
		t.Fatal(err)
	}
	doc["timeout"] = "3s"
	edited, _ := json.Marshal(doc)
	mark = srv.mark()
	putAPI(t, srv.natsURL, string(edited))
	conflictLogged(t, mark, "demo.hello's timeout edited")
	fromDemo(t, "demo.hello's timeout edited")

	// Roll back to the revision the demo published.
	hs, err := kv.History(ctx, "demo.hello")
	if err != nil {
		t.Fatal(err)
	}
	mark = srv.mark()
	if res := jetway(t, "", "api", "rollback", "demo.hello", fmt.Sprint(hs[0].Revision()), "--nats", srv.natsURL); res.code != 0 {
		t.Fatalf("api rollback: %d %s", res.code, res.stderr)
	}
	conflictLogged(t, mark, "demo.hello rolled back")
	fromDemo(t, "demo.hello rolled back")

	// A restart on the same data: the node rebuilds its routes from KV.
	srv.signal(t, syscall.SIGTERM)
	srv.waitExit(t, exitTimeout)
	srv = startNode(t, "serve-again", "serve", data, "--demo")
	srv.waitLog(t, startTimeout, `"demo ready"`, func(l logLine) bool { return strings.HasPrefix(l.str("msg"), "demo ready") })
	srv.waitReady(t)
	conflictLogged(t, 0, "after a restart")
	fromDemo(t, "after a restart")
}
