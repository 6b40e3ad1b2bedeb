package e2e

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// jetway serve --acme-host obtains a certificate for the host from an ACME
// server (pebble here, --acme-ca with --acme-ca-root) at the first
// handshake for it, without any --tls-cert.
func TestServeACME(t *testing.T) {
	t.Parallel()
	dirURL, _, roots := jetwaytest.StartPebble(t)
	n := startNode(t, "serve", "serve", "", "--acme-host", "acme.partner.test", "--acme-ca", dirURL, "--acme-ca-root", roots)
	n.waitReady(t)
	addr := strings.TrimPrefix(n.edge, "http://")
	natstest.CheckFor(t, startTimeout, pollEvery, func() error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr,
			&tls.Config{ServerName: "acme.partner.test", InsecureSkipVerify: true}) //nolint:gosec // pebble's roots are random; what was served is checked
		if err != nil {
			return err
		}
		defer conn.Close()
		c := conn.ConnectionState().PeerCertificates[0]
		if len(c.DNSNames) != 1 || c.DNSNames[0] != "acme.partner.test" || !strings.Contains(c.Issuer.CommonName, "Pebble") {
			return fmt.Errorf("served %v from %q", c.DNSNames, c.Issuer.CommonName)
		}
		return nil
	})
	if res := jetway(t, "", "serve", "--acme-host", "*.partner.test", "--data", t.TempDir(), "--admin", ""); res.code != 2 {
		t.Errorf("serve --acme-host '*.partner.test': exit %d %s, want 2", res.code, res.stderr)
	}
}
