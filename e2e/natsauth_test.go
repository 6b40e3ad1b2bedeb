package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/sign"
)

// startAuthServe starts serve --nats-auth and returns it with a function
// that gives its NATS URL with a role's credentials in it.
func startAuthServe(t *testing.T) (srv *node, withUser func(role string) string) {
	t.Helper()
	data := t.TempDir()
	srv = startNode(t, "serve", "serve", data, "--nats-auth")
	srv.waitReady(t)
	b, err := os.ReadFile(filepath.Join(data, "nats-credentials.json"))
	if err != nil {
		t.Fatal(err)
	}
	var creds map[string]string
	if err := json.Unmarshal(b, &creds); err != nil {
		t.Fatal(err)
	}
	return srv, func(role string) string {
		return strings.Replace(srv.natsURL, "nats://", "nats://"+role+":"+creds[role]+"@", 1)
	}
}

// With --nats-auth, every role connects as its own NATS user: edges and
// workers serve, but only the admin user can write the registry.
func TestNATSRolesLeastPrivilege(t *testing.T) {
	t.Parallel()
	srv, withUser := startAuthServe(t)
	// No credentials: no entry.
	if res := jetway(t, "", "api", "list", "--nats", srv.natsURL); res.code == 0 {
		t.Fatalf("api list without credentials worked:\n%s", res.stdout)
	}
	// The admin publishes.
	putAPI(t, withUser("admin"), entry("auth.api", "authp", "GET", "/v1/auth", mockBackend("guarded"), nil))
	waitBody(t, srv.edge+"/v1/auth", "guarded")

	// An edge and a worker join with their own users and serve.
	edge := startNode(t, "edge", "edge", "", "--nats", withUser("edge"))
	worker := startNode(t, "worker", "worker", "", "--nats", withUser("worker"), "--pool", "authp")
	edge.waitReady(t)
	if r := waitStatus(t, edge.edge+"/v1/auth", http.StatusOK); string(r.body) != "guarded" {
		t.Fatalf("edge process: %v", r)
	}

	// An edge's or a worker's credentials cannot rewrite the registry.
	for _, user := range []string{"edge", "worker"} {
		// Each role hears replies only on its own inbox prefix.
		nc, err := nats.Connect(withUser(user), nats.CustomInboxPrefix("_INBOX_"+user))
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		kv, err := js.KeyValue(ctx, "jetway_apis")
		if err != nil {
			t.Fatalf("%s cannot even read the registry: %v", user, err)
		}
		if _, err := kv.Get(ctx, "auth.api"); err != nil {
			t.Errorf("%s cannot read an entry: %v", user, err)
		}
		cancel()
		// A denied publish gets no answer: a short wait is enough.
		ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		if _, err := kv.Put(ctx, "auth.api", []byte(`{}`)); err == nil {
			t.Errorf("%s wrote the registry", user)
		}
		if err := js.DeleteKeyValue(ctx, "jetway_apis"); err == nil {
			t.Errorf("%s deleted the registry", user)
		}
		cancel()
		nc.Close()
	}
	if r := get(t, edge.edge+"/v1/auth"); r.status != 200 {
		t.Fatalf("after the attempts: %v", r)
	}

	// A shared cache: the serve process's edge keeps the answer in the
	// bucket, the edge process (as the edge user) serves it from there.
	putAPI(t, withUser("admin"), entry("auth.cached", "authp", "GET", "/v1/cached", mockBackend("kept"),
		map[string]any{"cache": map[string]any{"ttl": "1h", "shared": true}}))
	waitBody(t, srv.edge+"/v1/cached", "kept")
	waitFor(t, edge.edge+"/v1/cached", applyTimeout, func(r response) error {
		if r.status != 200 || r.header.Get("X-Cache") != "hit" {
			return fmt.Errorf("edge process: %v X-Cache %q", r, r.header.Get("X-Cache"))
		}
		return nil
	})

	// The worker's user reads the APIs, never the apps (their signing
	// secrets): only edges need them. The worker process, which watches
	// the registry as that user, serves all the same.
	for user, wantOK := range map[string]bool{"edge": true, "worker": false} {
		nc, err := nats.Connect(withUser(user), nats.CustomInboxPrefix("_INBOX_"+user))
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = js.KeyValue(ctx, "jetway_apps")
		cancel()
		nc.Close()
		if (err == nil) != wantOK {
			t.Errorf("%s opens the apps bucket: err %v", user, err)
		}
	}
	// No part of any role was refused anything it needs.
	for _, p := range []*node{srv, edge, worker} {
		for _, line := range p.output() {
			if strings.Contains(line, "Permissions Violation") {
				t.Errorf("%s was refused: %s", p.name, line)
			}
		}
	}
}

// A breaker event is a control message any node could forge. The server
// refuses one from an edge's user; a worker applies one only when it comes
// on its API's pool subject; and even then it can open the circuit no
// longer than the API's policy allows (max_open_for), whatever open_until
// it claims.
func TestForgedBreakerEvents(t *testing.T) {
	t.Parallel()
	srv, withUser := startAuthServe(t)
	putAPI(t, withUser("admin"), entry("brk.api", "brkp", "GET", "/v1/brk", mockBackend("fine"),
		map[string]any{"breaker": map[string]any{"open_for": "1s", "max_open_for": "2s", "slow_start": "-1s"}}))
	waitBody(t, srv.edge+"/v1/brk", "fine")

	forge := func(user, subject string) error {
		errs := make(chan error, 8)
		nc, err := nats.Connect(withUser(user), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		now := time.Now().UTC()
		ev, _ := json.Marshal(map[string]any{"api": "brk.api", "backend": "mock", "node": "forger", "from": "closed", "to": "open",
			"reason": "forged", "at": now, "open_for": "1h", "open_until": now.Add(time.Hour), "gen": 99999})
		if err := nc.Publish(subject, ev); err != nil {
			return err
		}
		_ = nc.FlushTimeout(2 * time.Second)
		select {
		case err := <-errs:
			return err
		case <-time.After(300 * time.Millisecond):
			return nil
		}
	}
	stillServes := func(what string) {
		t.Helper()
		time.Sleep(300 * time.Millisecond) // an applied event takes effect at once
		if r := get(t, srv.edge+"/v1/brk"); r.status != 200 {
			t.Fatalf("after %s: %v", what, r)
		}
	}

	// From an edge's user: refused by the server.
	if err := forge("edge", "jetway.breaker.brkp.brk.api"); !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("edge user published a breaker event: %v", err)
	}
	stillServes("an edge's forged event")
	// On another pool's subject (the embedded worker user may publish for
	// every pool): ignored by the worker.
	if err := forge("worker", "jetway.breaker.other.brk.api"); err != nil {
		t.Fatal(err)
	}
	stillServes("a forged event of another pool")
	// On the API's pool subject: applied, but for max_open_for at most.
	start := time.Now()
	if err := forge("worker", "jetway.breaker.brkp.brk.api"); err != nil {
		t.Fatal(err)
	}
	wantError(t, waitStatus(t, srv.edge+"/v1/brk", http.StatusServiceUnavailable), http.StatusServiceUnavailable, "CIRCUIT_OPEN")
	waitBody(t, srv.edge+"/v1/brk", "fine")
	if d := time.Since(start); d > 2*time.Second+time.Second {
		t.Fatalf("the forged open_until (1h) held the circuit open %v; max_open_for is 2s", d)
	}
}

// The nonce bucket deleted with everything up: an edge process, whose NATS
// user may not create streams, refuses signed calls (503) until serve, the
// admin node, has re-created the bucket, then serves them again — but not
// the replay of a request signed before, whose nonce went with the bucket.
func TestNonceBucketRecreatedForEdges(t *testing.T) {
	t.Parallel()
	_, withUser := startAuthServe(t)
	putAPI(t, withUser("admin"), `{"name":"signed.api","pool":"sg","route":{"method":"POST","path":"/v1/signed"},"backend":{"type":"mock","body":"ok"},"auth":{"methods":["hmac"]}}`)
	res := jetway(t, "", "app", "create", "signer", "--api", "signed.*", "--hmac", "--nats", withUser("admin"))
	m := secretRE.FindStringSubmatch(res.stdout)
	if res.code != 0 || m == nil {
		t.Fatalf("app create --hmac: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	secret, err := base64.RawURLEncoding.DecodeString(m[1])
	if err != nil {
		t.Fatal(err)
	}
	edge := startNode(t, "edge", "edge", "", "--nats", withUser("edge"))
	edge.waitReady(t)
	var auth string // the last signed request's
	signedWith := func(replay string) (int, string) {
		r, _ := http.NewRequest("POST", edge.edge+"/v1/signed", strings.NewReader("payload"))
		if replay != "" {
			r.Header.Set("Authorization", replay)
		} else if err := sign.Sign(r, []byte("payload"), "signer", secret); err != nil {
			t.Fatal(err)
		}
		auth = r.Header.Get("Authorization")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	signed := func() (int, string) { return signedWith("") }
	waitForFunc(t, func() error {
		if st, b := signed(); st != 200 {
			return fmt.Errorf("before: %d %s", st, b)
		}
		return nil
	})
	before := auth

	nc, err := nats.Connect(withUser("admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := js.DeleteKeyValue(ctx, "jetway_nonces"); err != nil {
		t.Fatal(err)
	}
	waitForFunc(t, func() error {
		st, b := signed()
		// 401 for a request signed in the second the edge heard of the deletion.
		if st != 200 && st != 503 && (st != 401 || !strings.Contains(b, "sign again")) {
			t.Fatalf("bucket gone: %d %s (want 503 until it is back)", st, b)
		}
		if st != 200 {
			return fmt.Errorf("after deleting the bucket: %d %s", st, b)
		}
		return nil
	})
	// The new bucket never saw the nonce of a request signed before.
	if st, b := signedWith(before); st != 401 || !strings.Contains(b, "signed before the replay record was lost") {
		t.Errorf("replay across the deletion: %d %s", st, b)
	}
}

// A relayed gRPC stream under the roles' NATS permissions: the worker may
// answer a request with a whole stream, the edge may acknowledge each
// chunk, and nothing is refused.
func TestStreamUnderNATSRoles(t *testing.T) {
	t.Parallel()
	srv := startNode(t, "serve", "serve", t.TempDir(), "--nats-auth", "--demo")
	srv.waitLog(t, startTimeout, `"demo ready"`, func(l logLine) bool { return strings.HasPrefix(l.str("msg"), "demo ready") })
	srv.waitReady(t)
	params := strings.TrimSuffix(strings.Repeat(`{"size":1},`, 200), ",")
	r, err := do(http.MethodPost, srv.edge+"/v1/grpc/stream", strings.NewReader(`{"responseParameters":[`+params+`]}`), http.Header{"Accept": {"text/event-stream"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.status != 200 || strings.Count(string(r.body), "data: ") != 200 || !strings.HasPrefix(string(r.body), "id: 0\ndata: ") {
		t.Fatalf("stream under roles: %d, %d events", r.status, strings.Count(string(r.body), "data: "))
	}
	for _, line := range srv.output() {
		if strings.Contains(line, "Permissions Violation") {
			t.Errorf("refused: %s", line)
		}
	}
}
