package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// jetway serve --tls-cert --tls-key serves the edge over TLS, HTTP/2 and
// HTTP/1.1; a certificate without its key, or one that does not load, is
// refused before anything starts (exit 2, the problem named).
func TestServeTLS(t *testing.T) {
	t.Parallel()
	ca := jetwaytest.NewCA(t)
	dir := t.TempDir()
	now := time.Now()
	f := ca.Issue(t, dir, 40, now.Add(-time.Minute), now.Add(time.Hour), "localhost")

	n := startNode(t, "serve", "serve", "", "--tls-cert", f.Cert, "--tls-key", f.Key)
	n.waitReady(t)
	putAPI(t, n.natsURL, entry("tls.hi", "p", "GET", "/v1/tls", mockBackend("hi"), nil))
	url := strings.Replace(n.edge, "http://127.0.0.1", "https://localhost", 1) + "/v1/tls"
	for _, h2 := range []bool{true, false} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		natstest.CheckFor(t, applyTimeout, pollEvery, func() error {
			resp, err := c.Get(url)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			want := 1
			if h2 {
				want = 2
			}
			if resp.StatusCode != 200 || string(b) != "hi" || resp.ProtoMajor != want {
				return fmt.Errorf("GET %s: HTTP/%d %d %q, want HTTP/%d 200 hi", url, resp.ProtoMajor, resp.StatusCode, b, want)
			}
			return nil
		})
		tr.CloseIdleConnections()
	}

	// A certificate put with jetway cert is served to its names within a
	// second (the edge's own file certificate stays the default).
	shop := ca.Issue(t, dir, 41, now.Add(-time.Minute), now.Add(time.Hour), "shop.partner.test")
	if res := jetway(t, "", "cert", "put", "shop", "--cert", shop.Cert, "--key", shop.Key, "--nats", n.natsURL); res.code != 0 {
		t.Fatalf("jetway cert put: exit %d %s", res.code, res.stderr)
	}
	addr := strings.TrimPrefix(n.edge, "http://")
	natstest.CheckFor(t, applyTimeout, pollEvery, func() error {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "shop.partner.test"})
		if err != nil {
			return err
		}
		defer conn.Close()
		if s := conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(); s != 41 {
			return fmt.Errorf("shop.partner.test got certificate %d", s)
		}
		return nil
	})
	if res := jetway(t, "", "cert", "put", "bad", "--cert", shop.Cert, "--key", f.Key, "--nats", n.natsURL); res.code == 0 {
		t.Error("jetway cert put with another certificate's key succeeded")
	}

	for _, bad := range [][]string{
		{"--tls-cert", f.Cert},
		{"--tls-cert", f.Key, "--tls-key", f.Key},
	} {
		res := jetway(t, "", append([]string{"serve", "--data", t.TempDir(), "--nats-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--admin", ""}, bad...)...)
		if res.code != 2 || !strings.Contains(res.stderr, "--tls-") {
			t.Errorf("serve %v: exit %d, stderr %q; want 2 naming the flag", bad, res.code, res.stderr)
		}
	}
}
