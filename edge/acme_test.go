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
