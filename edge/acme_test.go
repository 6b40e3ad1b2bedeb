package edge_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"

	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
)

// ACME: an edge obtains a certificate for an allowed name from the ACME
// server (pebble) at the first handshake for it, stores it in the registry
// (jetway_acme), and a second edge serves the same certificate from there
// without ordering another. A name not allowed gets none.
func TestACMECertificatesSharedThroughTheRegistry(t *testing.T) {
	dirURL, client, _ := jetwaytest.StartPebble(t)
	g := jetwaytest.Start(t)
	g.Publish(`{"name":"acme.mock","pool":"p","route":{"path":"/m"},"backend":{"type":"mock","body":"mock"}}`)
	js, err := jetstream.New(g.Conn)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := registry.OpenACME(context.Background(), js, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	edgeWithACME := func() string {
		certs, err := edge.LoadCerts(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		certs.UseACME(&autocert.Manager{
			Prompt:     autocert.AcceptTOS,
			Cache:      registry.ACMECache{KV: kv},
			HostPolicy: autocert.HostWhitelist("acme.partner.test"),
			Client:     &acme.Client{DirectoryURL: dirURL, HTTPClient: client},
		})
		return tlsEdge(t, g, certs)
	}
	served := func(addr, name string) (*x509.Certificate, error) {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", addr,
			&tls.Config{ServerName: name, InsecureSkipVerify: true}) //nolint:gosec // pebble's roots are random; the test checks what was served
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0], nil
	}
	first := edgeWithACME()
	got, err := served(first, "acme.partner.test")
	if err != nil {
		t.Fatalf("first handshake for an ACME name: %v", err)
	}
	if len(got.DNSNames) != 1 || got.DNSNames[0] != "acme.partner.test" || !strings.Contains(got.Issuer.CommonName, "Pebble") {
		t.Fatalf("served %v issued by %q", got.DNSNames, got.Issuer.CommonName)
	}
	second := edgeWithACME()
	again, err := served(second, "acme.partner.test")
	if err != nil {
		t.Fatal(err)
	}
	if again.SerialNumber.Cmp(got.SerialNumber) != 0 {
		t.Fatalf("the second edge served serial %v, the first %v: not shared through the registry", again.SerialNumber, got.SerialNumber)
	}
	if _, err := served(first, "other.partner.test"); err == nil {
		t.Fatal("a name ACME may not obtain got a certificate")
	}
}

// With ACME on, a client that lists acme-tls/1 among other protocols is
// no challenge: it gets the file certificate for its name, and ACME is
// not asked (here it could not answer: no server behind the URL).
func TestACMEOnlyForItsChallengesAndNames(t *testing.T) {
	ca := jetwaytest.NewCA(t)
	now := time.Now()
	certs, err := edge.LoadCerts([]edge.CertFile{ca.Issue(t, t.TempDir(), 130, now.Add(-time.Minute), now.Add(time.Hour), "api.example.test")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	certs.UseACME(&autocert.Manager{Prompt: autocert.AcceptTOS, Cache: autocert.DirCache(t.TempDir()),
		HostPolicy: autocert.HostWhitelist("api.example.test"),
		Client:     &acme.Client{DirectoryURL: "http://127.0.0.1:1/dir"}})
	g := jetwaytest.Start(t)
	addr := tlsEdge(t, g, certs)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "api.example.test", NextProtos: []string{"h2", "http/1.1", acme.ALPNProto}})
	if err != nil {
		t.Fatalf("a client listing acme-tls/1 among others: %v", err)
	}
	defer conn.Close()
	if s := conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(); s != 130 {
		t.Fatalf("served certificate %d, want the file's 130", s)
	}
	defer func() {
		if recover() == nil {
			t.Error("UseACME took a Manager without HostPolicy")
		}
	}()
	certs.UseACME(&autocert.Manager{})
}
