package natsbackend_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	natsjwt "github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	natsbackend "github.com/jetway-gw/jetway/backend/nats"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
)

// partner runs another NATS system with one user and a service on
// orders.get that says which system answered.
func partner(t *testing.T, name, user, pass string) *server.Server {
	t.Helper()
	opts := natstest.DefaultOptions(t)
	opts.JetStream = false
	opts.Username, opts.Password = user, pass
	s := natstest.RunServerWithOptions(t, opts)
	nc := natstest.Connect(t, s, nats.UserInfo(user, pass))
	if _, err := nc.Subscribe("orders.get", func(m *nats.Msg) {
		_ = m.Respond([]byte(name + ":" + string(m.Data) + ":" + m.Header.Get("Jetway-Method")))
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return s
}

func natsSecret(url, user, pass string) []byte {
	return fmt.Appendf(nil, `{"url":%q,"user":%q,"password":%q}`, url, user, pass)
}

// A nats backend with a server calls a service on another NATS system,
// logging in with the secret of its pool: refused at publish while the
// secret is not stored, dialled anew when it changes, failing fast and
// clearly when it is deleted, wrong, or the server is away.
func TestServiceOnAnotherServer(t *testing.T) {
	natsbackend.SetRecheck(t, 50*time.Millisecond)
	g := jetwaytest.Start(t)
	ctx := context.Background()
	one := partner(t, "one", "jetway", "pw1")

	api := `{"name":"partner.orders","pool":"p","route":{"method":"POST","path":"/partner/orders"},"timeout":"3s",
		"backend":{"type":"nats","subject":"orders.get","server":{"secret":"partner"}}}`
	_, err := g.Client.Put(ctx, []byte(api))
	var ve *registry.ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), "jetway secret put partner") {
		t.Fatalf("an API naming a secret that is not stored: %v", err)
	}
	if _, err := g.Client.PutSecret(ctx, "p", "partner", []byte(`{"url":"http://x:1"}`)); err == nil {
		t.Fatal("a secret with an http:// url was stored")
	}
	if _, err := g.Client.PutSecret(ctx, "p", "partner", natsSecret(one.ClientURL(), "jetway", "pw1")); err != nil {
		t.Fatal(err)
	}
	// Another pool's secret of that name is not this pool's.
	if _, err := g.Client.Put(ctx, []byte(strings.Replace(api, `"pool":"p"`, `"pool":"q"`, 1))); !errors.As(err, &ve) {
		t.Fatalf("an API of pool q naming pool p's secret: %v", err)
	}
	a := g.Publish(api)
	if strings.Contains(a.Backend.Label(), "pw1") {
		t.Fatalf("the entry holds the password: %s", a.Backend.Label())
	}
	if r := g.Do("POST", "/partner/orders", strings.NewReader("42")); r.Status != 200 || r.Body != "one:42:POST" {
		t.Fatalf("call to the other server: %d %s", r.Status, r.Body)
	}
	infos, err := g.Client.ListSecrets(ctx, "")
	if err != nil || len(infos) != 1 || infos[0].Pool != "p" || infos[0].Name != "partner" || infos[0].Err != nil {
		t.Fatalf("list: %+v %v", infos, err)
	}

	// The secret moves to another server: the worker dials it within its
	// next check, and calls never fail meanwhile.
	two := partner(t, "two", "jetway", "pw2")
	if _, err := g.Client.PutSecret(ctx, "p", "partner", natsSecret(two.ClientURL(), "jetway", "pw2")); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		r := g.Do("POST", "/partner/orders", strings.NewReader("7"))
		if r.Status != 200 {
			t.Fatalf("a call failed while the secret changed: %d %s", r.Status, r.Body)
		}
		if r.Body != "two:7:POST" {
			return fmt.Errorf("still %s", r.Body)
		}
		return nil
	})

	// Deleted: the calls fail, at once, saying why.
	if err := g.Client.DeleteSecret(ctx, "p", "partner"); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		r := g.Do("POST", "/partner/orders", nil)
		if r.Status != http.StatusBadGateway || !strings.Contains(r.Body, "not stored") {
			return fmt.Errorf("after the delete: %d %s", r.Status, r.Body)
		}
		return nil
	})

	// A wrong password and a server nobody runs: 502 naming the secret,
	// long before the API's deadline.
	if _, err := g.Client.PutSecret(ctx, "p", "partner", natsSecret(two.ClientURL(), "jetway", "wrong")); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		start := time.Now()
		r := g.Do("POST", "/partner/orders", nil)
		if r.Status != http.StatusBadGateway || !strings.Contains(r.Body, "cannot connect") || !strings.Contains(r.Body, "secret partner of pool p") {
			return fmt.Errorf("wrong password: %d %s", r.Status, r.Body)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("a wrong password answered after %v", d)
		}
		return nil
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "nats://" + l.Addr().String()
	_ = l.Close()
	if _, err := g.Client.PutSecret(ctx, "p", "partner", natsSecret(gone, "jetway", "pw2")); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		r := g.Do("POST", "/partner/orders", nil)
		if r.Status != http.StatusBadGateway || !strings.Contains(r.Body, "cannot connect") {
			return fmt.Errorf("no server: %d %s", r.Status, r.Body)
		}
		return nil
	})

	// The server goes away under a live connection: calls fail at once
	// while the worker reconnects, and pass again when it is back.
	if _, err := g.Client.PutSecret(ctx, "p", "partner", natsSecret(one.ClientURL(), "jetway", "pw1")); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if r := g.Do("POST", "/partner/orders", strings.NewReader("1")); r.Body != "one:1:POST" {
			return fmt.Errorf("back on server one: %d %s", r.Status, r.Body)
		}
		return nil
	})
	one.Shutdown()
	one.WaitForShutdown()
	// A call sent before the worker's connection has read the close waits
	// out its deadline (it was written to a socket that looked alive);
	// once the close is seen, calls fail at once.
	natstest.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		start := time.Now()
		r := g.Do("POST", "/partner/orders", nil)
		if r.Status != http.StatusBadGateway {
			return fmt.Errorf("server down: %d %s", r.Status, r.Body)
		}
		if d := time.Since(start); d > 2*time.Second {
			return fmt.Errorf("a call to a server that is down answered after %v, not at once", d)
		}
		return nil
	})
}

// Secrets are checked when stored: a bad one is refused with a reason and
// nothing is written.
func TestSecretValues(t *testing.T) {
	for _, c := range []struct{ value, want string }{
		{`{"url":""}`, "url is required"},
		{`{"url":"nats://u:p@h:4222"}`, "credentials go in"},
		{`{"url":"nats://h:4222","user":"u"}`, "come together"},
		{`{"url":"nats://h:4222","token":"t","user":"u","password":"p"}`, "one of"},
		{`{"url":"nats://h:4222","creds":"not a creds file"}`, "creds"},
		{`{"url":"nats://h:4222","ca":"not pem"}`, "PEM"},
		{`{"url":"nats://h:4222","passwd":"x"}`, "unknown field"},
		{`{"url":"nats://h:4222"} {}`, "one JSON object"},
		{`{"url":"nats://h:99999"}`, "bad port"},
	} {
		if _, err := registry.ParseNATSServer([]byte(c.value)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.value, err, c.want)
		}
	}
	if _, err := registry.ParseNATSServer([]byte(`{"url":"nats://a:4222, tls://b:4222","token":"t"}`)); err != nil {
		t.Errorf("two urls and a token: %v", err)
	}
	// A .creds file's text: its JWT and seed are what the worker logs in
	// with.
	account, _ := nkeys.CreateAccount()
	user, _ := nkeys.CreateUser()
	userPub, _ := user.PublicKey()
	userJWT, err := natsjwt.NewUserClaims(userPub).Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := user.Seed()
	creds, err := natsjwt.FormatUserConfig(userJWT, seed)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := json.Marshal(map[string]string{"url": "nats://h:4222", "creds": string(creds)})
	if _, err := registry.ParseNATSServer(doc); err != nil {
		t.Fatalf("a .creds file: %v", err)
	}
	if j, s, err := registry.ParseCreds(string(creds)); err != nil || j != userJWT || s != string(seed) {
		t.Fatalf("ParseCreds: %v (jwt equal %v, seed equal %v)", err, j == userJWT, s == string(seed))
	}
}
