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
