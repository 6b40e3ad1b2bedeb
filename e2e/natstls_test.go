package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// serve's embedded NATS can require mutual TLS on --nats-listen: an edge
// process and the CLI with the CA and a client certificate join and serve
// calls; an edge without a client certificate never becomes ready.
func TestNATSMutualTLSAcrossProcesses(t *testing.T) {
	t.Parallel()
	ca := jetwaytest.NewCA(t)
	dir := t.TempDir()
	now := time.Now()
	srv := ca.Issue(t, dir, 70, now.Add(-time.Minute), now.Add(time.Hour), "localhost")
	cli := ca.Issue(t, dir, 71, now.Add(-time.Minute), now.Add(time.Hour), "jetway-edge")
	caFile := ca.File(t, dir, "ca.pem")

	s := startNode(t, "serve", "serve", "", "--nats-listen-tls-cert", srv.Cert, "--nats-listen-tls-key", srv.Key, "--nats-listen-tls-ca", caFile)
	s.waitReady(t)
	url := strings.Replace(s.natsURL, "127.0.0.1", "localhost", 1)
	tlsFlags := []string{"--nats", url, "--nats-tls-ca", caFile, "--nats-tls-cert", cli.Cert, "--nats-tls-key", cli.Key}

	doc := entry("ntls.hi", "p", "GET", "/v1/ntls", mockBackend("over tls"), nil)
	if res := jetway(t, doc, append([]string{"api", "put", "-"}, tlsFlags...)...); res.code != 0 {
		t.Fatalf("api put over mutual TLS: exit %d %s", res.code, res.stderr)
	}
	if res := jetway(t, doc, "api", "put", "-", "--nats", url, "--nats-tls-ca", caFile, "--timeout", "2s"); res.code == 0 {
		t.Fatal("api put without a client certificate succeeded")
	}
	e := startNode(t, "edge", "edge", "", tlsFlags...)
	e.waitReady(t)
	waitBody(t, e.edge+"/v1/ntls", "over tls")

	bad := startNode(t, "edge-no-cert", "edge", "", "--nats", url, "--nats-tls-ca", caFile)
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		// The edge with its certificate was ready well within this.
		if st, _, err := bad.readyz(); err == nil && st == 200 {
			t.Fatal("an edge without a client certificate is ready")
		}
	}
}
