package bus_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// The embedded server can listen with mutual TLS; a client with the CA and
// a certificate it signed connects, one without either does not, nor does
// a plain connection. Bad client files are refused before any dial.
func TestNATSOverMutualTLS(t *testing.T) {
	ca := jetwaytest.NewCA(t)
	dir := t.TempDir()
	now := time.Now()
	srvCert := ca.Issue(t, dir, 60, now.Add(-time.Minute), now.Add(time.Hour), "localhost")
	cliCert := ca.Issue(t, dir, 61, now.Add(-time.Minute), now.Add(time.Hour), "edge-1")
	caFile := ca.File(t, dir, "ca.pem")
	other := jetwaytest.NewCA(t)
	strangerCert := other.Issue(t, dir, 62, now.Add(-time.Minute), now.Add(time.Hour), "stranger")

	cfg, err := bus.ServerTLS(srvCert.Cert, srvCert.Key, caFile)
	if err != nil {
		t.Fatal(err)
	}
	s, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0", DataDir: t.TempDir(), TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	url := strings.Replace(s.ClientURL(), "127.0.0.1", "localhost", 1)

	dial := func(a bus.ClientAuth) error {
		o, err := a.Options()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		nc, err := bus.Connect(ctx, url, bus.ConnectOptions{Name: "tls-test", Extra: o})
		if err != nil {
			return err
		}
		defer nc.Close()
		return nc.Flush()
	}
	if err := dial(bus.ClientAuth{CA: caFile, Cert: cliCert.Cert, Key: cliCert.Key}); err != nil {
		t.Fatalf("a client with the CA and its certificate: %v", err)
	}
	for name, a := range map[string]bus.ClientAuth{
		"no client certificate": {CA: caFile},
		"a stranger's":          {CA: caFile, Cert: strangerCert.Cert, Key: strangerCert.Key},
		"no CA":                 {Cert: cliCert.Cert, Key: cliCert.Key},
		"plain":                 {},
	} {
		if err := dial(a); err == nil {
			t.Errorf("%s: connected", name)
		}
	}

	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("nothing"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, a := range map[string]bus.ClientAuth{
		"cert without key": {Cert: cliCert.Cert},
		"CA without PEM":   {CA: empty},
		"missing CA":       {CA: filepath.Join(dir, "nope.pem")},
		"key of another":   {Cert: cliCert.Cert, Key: srvCert.Key},
		"creds and nkey":   {Creds: caFile, NKey: caFile},
		"missing creds":    {Creds: filepath.Join(dir, "nope.creds")},
		"bad nkey":         {NKey: empty},
	} {
		if _, err := a.Options(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// An NKey seed file authenticates a client to a server that knows only
// the key's public half; without it, or with another seed, no connection.
func TestNATSNKeyAuth(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	dir := t.TempDir()
	seedFile, otherFile := filepath.Join(dir, "user.nk"), filepath.Join(dir, "other.nk")
	for f, b := range map[string][]byte{seedFile: seed, otherFile: otherSeed} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("server not ready")
	}
	defer s.Shutdown()
	dial := func(a bus.ClientAuth) error {
		o, err := a.Options()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		nc, err := bus.Connect(ctx, s.ClientURL(), bus.ConnectOptions{Name: "nkey-test", Extra: o})
		if err != nil {
			return err
		}
		defer nc.Close()
		return nc.Flush()
	}
	if err := dial(bus.ClientAuth{NKey: seedFile}); err != nil {
		t.Fatalf("the user's seed: %v", err)
	}
	if err := dial(bus.ClientAuth{NKey: otherFile}); err == nil {
		t.Error("another seed connected")
	}
	if err := dial(bus.ClientAuth{}); err == nil {
		t.Error("no seed connected")
	}
}
