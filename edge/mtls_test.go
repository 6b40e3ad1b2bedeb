package edge_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/registry"
)

// The mtls method: a client certificate that chains to the API's CA and
// names an app (cert_names) from that app's own CA (cert_ca) makes the
// call that app's, over HTTP/1.1 and HTTP/2 alike, with its grants; no
// certificate, an untrusted CA's, an unknown name, a disabled app, another
// trusted partner CA signing the app's name, or names of two apps is 401,
// and another method still works.
func TestClientCertificateAuth(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "app="+r.Header.Get("X-Jetway-App"))
	}))
	defer be.Close()
	ca := jetwaytest.NewCA(t)
	dir := t.TempDir()
	now := time.Now()
	partnerB := jetwaytest.NewCA(t) // another partner's CA, trusted by the API too
	caFile := filepath.Join(dir, "clients.pem")
	jetwaytest.WriteFile(t, caFile, append(ca.PEM(), partnerB.PEM()...))
	fp := registry.CertFingerprint(ca.Certificate().Raw)
	g := jetwaytest.Start(t)
	g.Publish(`{"name":"m.orders","pool":"p","route":{"path":"/m"},"backend":{"type":"http","url":"` + be.URL + `/"},
		"auth":{"methods":["mtls","key"],"mtls":{"ca_file":"` + caFile + `"}}}`)
	g.Publish(`{"name":"m.other","pool":"p","route":{"path":"/o"},"backend":{"type":"http","url":"` + be.URL + `/"},
		"auth":{"methods":["mtls"],"mtls":{"ca_file":"` + caFile + `"}}}`)
	g.PutApps(
		&registry.App{ID: "partner", Status: registry.AppActive, APIs: []string{"m.orders"}, CertNames: []string{"partner-a"}, CertCA: fp},
		&registry.App{ID: "gone", Status: registry.AppDisabled, APIs: []string{"*"}, CertNames: []string{"gone-a"}, CertCA: fp},
		&registry.App{ID: "second", Status: registry.AppActive, APIs: []string{"*"}, CertNames: []string{"second-a"}, CertCA: fp},
	)
	key := g.PutKeyedApp("keyed", "m.orders")

	serverCA := jetwaytest.NewCA(t)
	certs, err := edge.LoadCerts([]edge.CertFile{serverCA.Issue(t, dir, 90, now.Add(-time.Minute), now.Add(time.Hour), "api.example.test")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := tlsEdgeWith(t, g, certs, func(c *tls.Config) { c.ClientAuth = tls.RequestClientCert })

	client := func(cf *edge.CertFile, h2 bool) *http.Client {
		c := tlsClient(serverCA.Pool, "api.example.test", h2)
		if cf != nil {
			pair, err := tls.LoadX509KeyPair(cf.Cert, cf.Key)
			if err != nil {
				t.Fatal(err)
			}
			c.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{pair}
		}
		return c
	}
	get := func(c *http.Client, path string, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	partner := ca.Issue(t, dir, 91, now.Add(-time.Minute), now.Add(time.Hour), "partner-a")
	for _, h2 := range []bool{false, true} {
		if st, body := get(client(&partner, h2), "/m"); st != 200 || body != "app=partner" {
			t.Errorf("h2=%v partner's certificate: %d %q", h2, st, body)
		}
	}
	if st, _ := get(client(&partner, true), "/o"); st != http.StatusForbidden {
		t.Errorf("partner's certificate on an API it is not granted: %d, want 403", st)
	}
	stranger := jetwaytest.NewCA(t).Issue(t, dir, 92, now.Add(-time.Minute), now.Add(time.Hour), "partner-a")
	unknown := ca.Issue(t, dir, 93, now.Add(-time.Minute), now.Add(time.Hour), "nobody")
	disabled := ca.Issue(t, dir, 94, now.Add(-time.Minute), now.Add(time.Hour), "gone-a")
	impostor := partnerB.Issue(t, dir, 95, now.Add(-time.Minute), now.Add(time.Hour), "partner-a")
	both := ca.Issue(t, dir, 96, now.Add(-time.Minute), now.Add(time.Hour), "partner-a", "second-a")
	for name, cf := range map[string]*edge.CertFile{"no certificate": nil, "an untrusted CA's": &stranger, "an unknown name": &unknown,
		"a disabled app's": &disabled, "another partner CA's, with the app's name": &impostor, "two apps' names": &both} {
		if st, body := get(client(cf, true), "/m"); st != http.StatusUnauthorized {
			t.Errorf("%s: %d %q, want 401", name, st, body)
		}
	}
	if st, body := get(client(nil, true), "/m", "X-Api-Key", key); st != 200 || body != "app=keyed" {
		t.Errorf("an API key on the same API: %d %q", st, body)
	}
}
