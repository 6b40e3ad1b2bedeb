package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/admin"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
)

// restBoot is the bootstrap token of the admin APIs these tests run.
const restBoot = "0123456789abcdef0123456789abcdef"

// restAdmin serves an admin API over g's registry (with g's edge for
// cases, or none) and returns it, the CLI flags that reach it, and a
// command runner that adds them.
func restAdmin(t *testing.T, g *jetwaytest.Gateway, withEdge bool) (*httptest.Server, []string, func(stdin string, args ...string) cmdResult) {
	o := admin.Options{Client: g.Client, Bootstrap: restBoot}
	if withEdge {
		o.EdgeURL = g.URL
	}
	srv := httptest.NewServer(admin.New(o).Handler())
	t.Cleanup(srv.Close)
	rest := []string{"--admin-url", srv.URL, "--admin-token", restBoot}
	return srv, rest, func(stdin string, args ...string) cmdResult { return runCmd(stdin, append(args, rest...)...) }
}

// The CLI over the admin REST API: the same commands, the same output and
// exit codes, every write a compare-and-set at the revision given or read,
// and the trail naming the token.
func TestCLIOverREST(t *testing.T) {
	g := jetwaytest.Start(t)
	srv, _, cli := restAdmin(t, g, true)
	doc := func(v string) string {
		return `{"name":"rest.a","pool":"p","route":{"path":"/rest/a"},"auth":{"methods":["key"]},"backend":{"type":"mock","json":{"v":"` + v + `"}},
			"cases":[{"name":"v","request":{"path":"/rest/a"},"expect":{"status":200,"body":{"/v":"` + v + `"}}}]}`
	}
	liveKey := g.PutKeyedApp("live")
	sbKey, sbRec, _ := registry.NewAPIKey()
	g.PutApps(&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{sbRec}, APIs: []string{"*"}, Sandbox: true})

	if r := cli(doc("1"), "api", "put", "-"); r.code != 0 || !strings.Contains(r.stdout, "published rest.a") {
		t.Fatalf("put: %+v", r)
	}
	if r := cli(doc("2"), "api", "put", "-", "--if-revision", "999"); r.code != exitConflict || !strings.Contains(r.stderr, "conflict") {
		t.Fatalf("a stale --if-revision: %+v", r)
	}
	if r := cli(`{"name":"rest.a","pool":"p","route":{"path":"/rest/a"},"backend":{"type":"mock"},"bogus":1}`, "api", "put", "-"); r.code != 1 || !strings.Contains(r.stderr, "bogus") {
		t.Fatalf("an invalid entry: %+v", r)
	}
	if r := cli("", "api", "get", "rest.a"); r.code != 0 || !strings.Contains(r.stdout, `"rest.a"`) {
		t.Fatalf("get: %+v", r)
	}
	if r := cli("", "api", "list"); r.code != 0 || !strings.Contains(r.stdout, "rest.a") {
		t.Fatalf("list: %+v", r)
	}
	waitBody := func(key, want string) {
		t.Helper()
		natstest.CheckFor(t, 3*time.Second, 10*time.Millisecond, func() error {
			if r := g.Do("GET", "/rest/a", nil, "X-Api-Key", key); r.Body != want {
				return fmt.Errorf("%d %s, want %s", r.Status, r.Body, want)
			}
			return nil
		})
	}
	waitBody(liveKey, `{"v":"1"}`)

	if r := cli("", "degrade", "on", "rest.a", "--reason", "rest"); r.code != 0 || !strings.Contains(r.stdout, "degraded rest.a") {
		t.Fatalf("degrade on: %+v", r)
	}
	if r := cli("", "degrade", "list"); r.code != 0 || !strings.Contains(r.stdout, "rest.a") {
		t.Fatalf("degrade list: %+v", r)
	}
	natstest.CheckFor(t, 3*time.Second, 10*time.Millisecond, func() error {
		if r := g.Do("GET", "/rest/a", nil, "X-Api-Key", liveKey); r.Code != "DEGRADED" {
			return fmt.Errorf("%d %s", r.Status, r.Body)
		}
		return nil
	})
	if r := cli("", "degrade", "off", "rest.a"); r.code != 0 {
		t.Fatalf("degrade off: %+v", r)
	}
	waitBody(liveKey, `{"v":"1"}`)

	if r := cli(doc("2"), "api", "put", "-", "--draft"); r.code != 0 || !strings.Contains(r.stdout, "wrote the draft of rest.a") {
		t.Fatalf("put --draft: %+v", r)
	}
	if r := cli("", "api", "test", "rest.a", "--draft", "--key", sbKey); r.code != 0 || !strings.Contains(r.stdout, "1 of 1 cases passed") {
		t.Fatalf("test --draft: %+v", r)
	}
	if r := cli("", "api", "promote", "rest.a", "--key", liveKey); r.code != 1 || !strings.Contains(r.stdout, "FAIL") {
		t.Fatalf("promote tested with a production key: %+v", r)
	}
	if r := cli("", "api", "promote", "rest.a", "--key", sbKey); r.code != 0 || !strings.Contains(r.stdout, "promoted the draft of rest.a") {
		t.Fatalf("promote: %+v", r)
	}
	waitBody(liveKey, `{"v":"2"}`)
	if r := cli("", "api", "delete", "rest.a"); r.code != 0 {
		t.Fatalf("delete: %+v", r)
	}
	if r := cli("", "api", "history", "rest.a"); r.code != 2 || !strings.Contains(r.stderr, "no --admin-url form") {
		t.Fatalf("a command without a REST form: %+v", r)
	}
	if r := runCmd("", "api", "list", "--admin-url", srv.URL, "--admin-token", "wrong-token-wrong-token-wrong-tok"); r.code != 1 || !strings.Contains(r.stderr, "UNAUTHENTICATED") {
		t.Fatalf("a wrong token: %+v", r)
	}

	changes, err := g.Client.Audit(context.Background(), time.Time{}, "api", 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range changes {
		if c.Actor != "bootstrap-token" {
			t.Errorf("change %+v not by the token", c)
		}
	}

	// The dead letters of async jobs, over REST as over NATS.
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) }))
	t.Cleanup(down.Close)
	g.Publish(`{"name":"rest.jobs","pool":"p","route":{"method":"POST","path":"/rest/jobs"},"backend":{"type":"http","url":"` + down.URL + `"},"async":{"attempts":1}}`)
	if r := g.Do("POST", "/rest/jobs", strings.NewReader("x"), "Prefer", "respond-async"); r.Status != 202 {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	var seq string
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		r := cli("", "dlq", "list", "rest.jobs")
		for _, line := range strings.Split(r.stdout, "\n") {
			if f := strings.Fields(line); len(f) > 5 && f[2] == "rest.jobs" && f[5] == "retries_exhausted" {
				seq = f[0]
				return nil
			}
		}
		return fmt.Errorf("dlq list: %+v", r)
	})
	if r := cli("", "dlq", "show", seq); r.code != 0 || !strings.Contains(r.stdout, `"body":"x"`) {
		t.Fatalf("dlq show: %+v", r)
	}
	if r := cli("", "dlq", "replay", seq); r.code != 0 || !strings.Contains(r.stdout, "sent again") {
		t.Fatalf("dlq replay: %+v", r)
	}
	natstest.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error { // it fails again
		if r := cli("", "dlq", "list", "rest.jobs"); strings.Count(r.stdout, "rest.jobs") != 1 {
			return fmt.Errorf("dlq list after the replay: %+v", r)
		}
		return nil
	})
	if r := cli("", "dlq", "purge", "rest.jobs"); r.code != 0 || !strings.Contains(r.stdout, "1 dead letters removed") {
		t.Fatalf("dlq purge: %+v", r)
	}
}

// Found by review: what the REST CLI must not do.
func TestCLIOverRESTRefuses(t *testing.T) {
	g := jetwaytest.Start(t)
	srv, _, cli := restAdmin(t, g, false)

	t.Run("follow a redirect", func(t *testing.T) {
		var sawToken atomic.Bool
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sawToken.Store(r.Header.Get("Authorization") != "")
			w.Header().Set("ETag", `"7"`)
			io.WriteString(w, `{}`)
		}))
		t.Cleanup(other.Close)
		redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+r.URL.Path, http.StatusFound)
		}))
		t.Cleanup(redir.Close)
		r := runCmd(`{"name":"rest.r","pool":"p","route":{"path":"/r"},"backend":{"type":"mock"}}`, "api", "put", "-", "--admin-url", redir.URL, "--admin-token", restBoot)
		if r.code != 1 || strings.Contains(r.stdout, "published") || !strings.Contains(r.stderr, "redirects are not followed") || sawToken.Load() {
			t.Fatalf("%+v (the token reached the redirect's target: %v)", r, sawToken.Load())
		}
	})
	t.Run("a switch that would do nothing", func(t *testing.T) {
		if r := cli("", "degrade", "on", "no.such.api"); r.code != 1 || !strings.Contains(r.stderr, "not published") {
			t.Fatalf("%+v", r)
		}
		if r := cli("", "degrade", "on", "no.such.api", "--ahead"); r.code != 0 {
			t.Fatalf("--ahead: %+v", r)
		}
	})
	t.Run("a stored switch that does not validate is cleared", func(t *testing.T) {
		js, _ := jetstream.New(g.Conn)
		flags, err := js.KeyValue(context.Background(), registry.BucketFlags)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := flags.Put(context.Background(), "degrade.bad", []byte(`{"on":true,"bogus":1}`)); err != nil {
			t.Fatal(err)
		}
		if r := cli("", "degrade", "off", "bad"); r.code != 0 {
			t.Fatalf("%+v", r)
		}
		if _, err := flags.Get(context.Background(), "degrade.bad"); err == nil {
			t.Fatal("the invalid switch is still there")
		}
	})
	t.Run("flags it cannot honour, and answers that are not the API's", func(t *testing.T) {
		if r := cli("", "api", "get", "x", "--revision", "1"); r.code != 2 || !strings.Contains(r.stderr, "--revision") {
			t.Fatalf("--revision: %+v", r)
		}
		if r := cli("", "api", "get", "x", "--nats", g.Server.ClientURL()); r.code != 2 {
			t.Fatalf("--nats and --admin-url: %+v", r)
		}
		page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html>sign in</html>") }))
		t.Cleanup(page.Close)
		if r := runCmd("", "api", "list", "--admin-url", page.URL, "--admin-token", restBoot); r.code != 1 || !strings.Contains(r.stderr, "not the API's JSON") {
			t.Fatalf("a page that is not the API's: %+v", r)
		}
	})
	t.Run("JETWAY_ADMIN_URL leaves commands without a REST form on NATS", func(t *testing.T) {
		t.Setenv("JETWAY_ADMIN_URL", srv.URL)
		t.Setenv("JETWAY_ADMIN_TOKEN", restBoot)
		must(t, runCmd(`{"name":"rest.h","pool":"p","route":{"path":"/h"},"backend":{"type":"mock"}}`, "api", "put", "-"))
		if r := runCmd("", "api", "history", "rest.h", "--nats", g.Server.ClientURL()); r.code != 0 || !strings.Contains(r.stdout, "PUT") {
			t.Fatalf("history with JETWAY_ADMIN_URL set: %+v", r)
		}
		if r := runCmd("", "api", "test", "rest.h"); r.code != 1 || !strings.Contains(r.stderr, "NO_EDGE") {
			t.Fatalf("test on an admin API without an edge: %+v", r)
		}
	})
}

func must(t *testing.T, r cmdResult) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
}

// jetway admin serves on --admin, so an empty one is refused before
// anything starts.
func TestAdminRoleNeedsItsListener(t *testing.T) {
	if r := runCmd("", "admin", "--admin", "", "--nats", "nats://127.0.0.1:1"); r.code != 2 || !strings.Contains(r.stderr, "cannot be empty") {
		t.Fatalf("%+v", r)
	}
}

// The app commands over REST: the operations that make credentials are
// the server's, shown once; grants at once are both kept.
func TestAppCommandsOverREST(t *testing.T) {
	g := jetwaytest.Start(t)
	_, rest, restCLI := restAdmin(t, g, false)
	cli := func(args ...string) cmdResult { return restCLI("", args...) }
	g.Publish(`{"name":"ra.x","pool":"p","route":{"path":"/ra"},"auth":{"methods":["key"]},"backend":{"type":"mock","json":{"ok":true}}}`)

	r := cli("app", "create", "ra", "--name", "R", "--api", "other.*")
	m := regexp.MustCompile(`API key \(shown once, store it now\): (\S+)`).FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil {
		t.Fatalf("create: %+v", r)
	}
	key := m[1]
	if r := cli("app", "create", "ra"); r.code != 1 || !strings.Contains(r.stderr, "exists already") {
		t.Fatalf("create twice: %+v", r)
	}
	waitStatus := func(k string, want int) {
		t.Helper()
		natstest.CheckFor(t, 3*time.Second, 10*time.Millisecond, func() error {
			if got := g.Do("GET", "/ra", nil, "X-Api-Key", k).Status; got != want {
				return fmt.Errorf("%d, want %d", got, want)
			}
			return nil
		})
	}
	waitStatus(key, 403) // not granted ra.x yet
	for _, res := range concurrently(append([]string{"app", "grant", "ra", "ra.*"}, rest...), append([]string{"app", "grant", "ra", "more.*"}, rest...)) {
		if res.code != 0 {
			t.Fatalf("grant: %+v", res)
		}
	}
	if r := cli("app", "get", "ra"); r.code != 0 || !strings.Contains(r.stdout, "ra.*") || !strings.Contains(r.stdout, "more.*") || !strings.Contains(r.stdout, "other.*") {
		t.Fatalf("both grants at once must be kept: %+v", r)
	}
	waitStatus(key, 200)
	r = cli("app", "rotate-key", "ra")
	m = regexp.MustCompile(`API key \(shown once, store it now\): (\S+)`).FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil {
		t.Fatalf("rotate-key: %+v", r)
	}
	waitStatus(key, 401)
	waitStatus(m[1], 200)
	if r := cli("app", "disable", "ra"); r.code != 0 || !strings.Contains(r.stdout, "is disabled") {
		t.Fatalf("disable: %+v", r)
	}
	waitStatus(m[1], 401)
	if r := cli("app", "enable", "ra"); r.code != 0 {
		t.Fatalf("enable: %+v", r)
	}
	if r := cli("app", "revoke", "ra", "ra.*"); r.code != 0 || strings.Contains(r.stdout, "ra.*") {
		t.Fatalf("revoke: %+v", r)
	}
	waitStatus(m[1], 403)
	if r := cli("app", "list"); r.code != 0 || !strings.Contains(r.stdout, "ra") {
		t.Fatalf("list: %+v", r)
	}
	if r := cli("app", "limit", "ra", "5"); r.code != 2 || !strings.Contains(r.stderr, "no --admin-url form") {
		t.Fatalf("a command without a REST form: %+v", r)
	}
	changes, err := g.Client.Audit(context.Background(), time.Time{}, "app", 100)
	if err != nil || len(changes) == 0 {
		t.Fatalf("audit: %v %v", changes, err)
	}
	for _, c := range changes {
		if c.Actor != "bootstrap-token" {
			t.Errorf("change %+v not by the token", c)
		}
	}
}
