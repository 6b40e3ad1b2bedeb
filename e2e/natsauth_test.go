package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
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

// With --nats-auth, every role connects as its own NATS user: edges and
// workers serve, but only the admin user can write the registry.
func TestNATSRolesLeastPrivilege(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	srv := startNode(t, "serve", "serve", data, "--nats-auth")
	srv.waitReady(t)
	b, err := os.ReadFile(filepath.Join(data, "nats-credentials.json"))
	if err != nil {
		t.Fatal(err)
	}
	var creds map[string]string
	if err := json.Unmarshal(b, &creds); err != nil {
		t.Fatal(err)
	}
	withUser := func(user string) string {
		return strings.Replace(srv.natsURL, "nats://", "nats://"+user+":"+creds[user]+"@", 1)
	}
	// No credentials: no entry.
	if res := jetway(t, "", "api", "list", "--nats", srv.natsURL); res.code == 0 {
		t.Fatalf("api list without credentials worked:\n%s", res.stdout)
	}
	// The admin publishes.
	putAPI(t, withUser("admin"), entry("auth.api", "authp", "GET", "/v1/auth", mockBackend("guarded"), nil))
	waitBody(t, srv.edge+"/v1/auth", "guarded")

	// An edge and a worker join with their own users and serve.
	edge := startNode(t, "edge", "edge", "", "--nats", withUser("edge"))
	startNode(t, "worker", "worker", "", "--nats", withUser("worker"), "--pool", "authp")
	edge.waitReady(t)
	if r := waitStatus(t, edge.edge+"/v1/auth", http.StatusOK); string(r.body) != "guarded" {
		t.Fatalf("edge process: %v", r)
	}

	// An edge's or a worker's credentials cannot rewrite the registry.
	for _, user := range []string{"edge", "worker"} {
		nc, err := nats.Connect(withUser(user))
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
}

// The nonce bucket deleted with everything up: an edge process, whose NATS
// user may not create streams, refuses signed calls (503) until serve, the
// admin node, has re-created the bucket, then serves them again.
func TestNonceBucketRecreatedForEdges(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	srv := startNode(t, "serve", "serve", data, "--nats-auth")
	srv.waitReady(t)
	b, err := os.ReadFile(filepath.Join(data, "nats-credentials.json"))
	if err != nil {
		t.Fatal(err)
	}
	var creds map[string]string
	if err := json.Unmarshal(b, &creds); err != nil {
		t.Fatal(err)
	}
	withUser := func(user string) string {
		return strings.Replace(srv.natsURL, "nats://", "nats://"+user+":"+creds[user]+"@", 1)
	}
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
	signed := func() (int, string) {
		r, _ := http.NewRequest("POST", edge.edge+"/v1/signed", strings.NewReader("payload"))
		if err := sign.Sign(r, []byte("payload"), "signer", secret); err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitForFunc(t, func() error {
		if st, b := signed(); st != 200 {
			return fmt.Errorf("before: %d %s", st, b)
		}
		return nil
	})

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
		if st != 200 && st != 503 {
			t.Fatalf("bucket gone: %d %s (want 503 until it is back)", st, b)
		}
		if st != 200 {
			return fmt.Errorf("after deleting the bucket: %d %s", st, b)
		}
		return nil
	})
}
