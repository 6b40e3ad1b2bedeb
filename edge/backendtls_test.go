package edge_test

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// An https backend that requires a client certificate: the worker calls it
// with the API's cert_file/key_file, verifies it against ca_file under
// server_name, and the call goes through; without the certificate, with
// another CA or another name the call fails with BAD_GATEWAY, never with
// an unverified backend.
func TestBackendMutualTLS(t *testing.T) {
	ca := jetwaytest.NewCA(t)
	dir := t.TempDir()
	now := time.Now()
	srvCert := ca.Issue(t, dir, 80, now.Add(-time.Minute), now.Add(time.Hour), "backend.test")
	cliCert := ca.Issue(t, dir, 81, now.Add(-time.Minute), now.Add(time.Hour), "jetway-worker")
	caFile := ca.File(t, dir, "ca.pem")
	otherCA := jetwaytest.NewCA(t).File(t, dir, "other.pem")

	pair, err := tls.LoadX509KeyPair(srvCert.Cert, srvCert.Key)
	if err != nil {
		t.Fatal(err)
	}
	be := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	be.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: ca.Pool, ClientAuth: tls.RequireAndVerifyClientCert}
	be.StartTLS()
	defer be.Close()

	g := jetwaytest.Start(t)
	publish := func(name, tlsJSON string) {
		g.Publish(`{"name":"` + name + `","pool":"p","route":{"path":"/` + name + `"},"backend":{"type":"http","url":"` + be.URL + `/x","tls":` + tlsJSON + `}}`)
	}
	publish("good", `{"ca_file":"`+caFile+`","cert_file":"`+cliCert.Cert+`","key_file":"`+cliCert.Key+`","server_name":"backend.test"}`)
	publish("nocert", `{"ca_file":"`+caFile+`","server_name":"backend.test"}`)
	publish("otherca", `{"ca_file":"`+otherCA+`","cert_file":"`+cliCert.Cert+`","key_file":"`+cliCert.Key+`","server_name":"backend.test"}`)
	publish("othername", `{"ca_file":"`+caFile+`","cert_file":"`+cliCert.Cert+`","key_file":"`+cliCert.Key+`","server_name":"elsewhere.test"}`)
	publish("nofile", `{"ca_file":"`+filepath.Join(dir, "missing.pem")+`"}`)

	if r := g.Do(http.MethodGet, "/good", nil); r.Status != 200 || r.Body != "hello jetway-worker" {
		t.Fatalf("mutual TLS backend: %d %q", r.Status, r.Body)
	}
	for _, p := range []string{"/nocert", "/otherca", "/othername", "/nofile"} {
		if r := g.Do(http.MethodGet, p, nil); r.Status != http.StatusBadGateway || r.Code != "BAD_GATEWAY" {
			t.Errorf("%s: %d %s, want 502 BAD_GATEWAY", p, r.Status, r.Body)
		}
	}

	// tls on a plain URL, or half a client pair, is refused at publish.
	for _, doc := range []string{
		`{"name":"bad1","pool":"p","route":{"path":"/bad1"},"backend":{"type":"http","url":"http://x/","tls":{"ca_file":"a"}}}`,
		`{"name":"bad2","pool":"p","route":{"path":"/bad2"},"backend":{"type":"http","url":"https://x/","tls":{"cert_file":"a"}}}`,
	} {
		if _, err := g.Client.Put(t.Context(), []byte(doc)); err == nil || !strings.Contains(err.Error(), "backend.tls") {
			t.Errorf("published %s: %v", doc, err)
		}
	}
}
