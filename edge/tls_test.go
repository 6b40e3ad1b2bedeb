package edge_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// tlsEdge serves g's edge over TLS with certs, as jetway serve does:
// ListenTLS on a TCP listener, one http.Server on both sides.
func tlsEdge(t *testing.T, g *jetwaytest.Gateway, certs *edge.Certs) string {
	t.Helper()
	return tlsEdgeWith(t, g, certs, nil)
}

// tlsEdgeWith is tlsEdge with the TLS config changed by tune first.
func tlsEdgeWith(t *testing.T, g *jetwaytest.Gateway, certs *edge.Certs, tune func(*tls.Config)) string {
	t.Helper()
	return serveTLS(t, g.Edge, certs, tune)
}

// tlsEdgeOf serves another edge of the gateway over TLS.
func tlsEdgeOf(t *testing.T, e *edge.Edge, certs *edge.Certs) string {
	t.Helper()
	return serveTLS(t, e, certs, nil)
}

func serveTLS(t *testing.T, e *edge.Edge, certs *edge.Certs, tune func(*tls.Config)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := certs.TLSConfig()
	if tune != nil {
		tune(cfg)
	}
	tl := edge.ListenTLS(ln, cfg, 2*time.Second, 64<<10)
	srv := &http.Server{Handler: e, ConnContext: edge.ConnContext, ReadHeaderTimeout: 2 * time.Second,
		MaxHeaderBytes: 64 << 10, DisableGeneralOptionsHandler: true}
	go func() { _ = srv.Serve(tl.HTTP1()) }()
	go func() { _ = srv.Serve(tl.HTTP2()) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

func tlsClient(pool *x509.CertPool, serverName string, h2 bool) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName}, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

// The edge over TLS: HTTP/1.1 and HTTP/2 clients reach the backend, which
// learns X-Forwarded-Proto https; GET and POST with a body; the certificate
// follows the client's server name, the first one is the default.
func TestEdgeTLS(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s proto=%s body=%s", r.Method, r.URL.Path, r.Header.Get("X-Forwarded-Proto"), b)
	}))
	defer be.Close()
	g := jetwaytest.Start(t)
	g.Publish(`{"name":"tls.echo","pool":"p","route":{"path":"/t/{x}"},"backend":{"type":"http","url":"` + be.URL + `/b/{x}"}}`)
	g.Publish(`{"name":"tls.echo.post","pool":"p","route":{"method":"POST","path":"/t/{x}"},"backend":{"type":"http","url":"` + be.URL + `/b/{x}"}}`)
	ca := jetwaytest.NewCA(t)
	dir := t.TempDir()
	now := time.Now()
	certs, err := edge.LoadCerts([]edge.CertFile{
		ca.Issue(t, dir, 10, now.Add(-time.Minute), now.Add(time.Hour), "api.example.test"),
		ca.Issue(t, dir, 11, now.Add(-time.Minute), now.Add(time.Hour), "*.partner.test"),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := tlsEdge(t, g, certs)

	for _, h2 := range []bool{false, true} {
		c := tlsClient(ca.Pool, "api.example.test", h2)
		resp, err := c.Get("https://" + addr + "/t/get")
		if err != nil {
			t.Fatalf("h2=%v: %v", h2, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := 1; h2 {
			want = 2
			if resp.ProtoMajor != want {
				t.Errorf("spoke HTTP/%d, want HTTP/%d", resp.ProtoMajor, want)
			}
		} else if resp.ProtoMajor != want {
			t.Errorf("spoke HTTP/%d, want HTTP/%d", resp.ProtoMajor, want)
		}
		if resp.StatusCode != 200 || string(b) != "GET /b/get proto=https body=" {
			t.Errorf("h2=%v GET: %d %q", h2, resp.StatusCode, b)
		}
		resp, err = c.Post("https://"+addr+"/t/post", "text/plain", strings.NewReader("payload"))
		if err != nil {
			t.Fatalf("h2=%v POST: %v", h2, err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "POST /b/post proto=https body=payload" {
			t.Errorf("h2=%v POST: %d %q", h2, resp.StatusCode, b)
		}
	}

	serial := func(name string) int64 {
		t.Helper()
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: name})
		if err != nil {
			t.Fatalf("handshake for %q: %v", name, err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if s := serial("a.partner.test"); s != 11 {
		t.Errorf("a.partner.test got certificate %d, want 11", s)
	}
	if s := serial("api.example.test"); s != 10 {
		t.Errorf("api.example.test got certificate %d, want 10", s)
	}
	// An unknown name gets the default, which the client then refuses.
	if _, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "other.test"}); err == nil {
		t.Error("a client asking for other.test accepted the default certificate")
	}
	if _, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "api.example.test"}); err == nil {
		t.Error("a client without the CA accepted the certificate")
	}
	// TLS 1.1 is refused.
	if _, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "api.example.test", MaxVersion: tls.VersionTLS11}); err == nil {
		t.Error("a TLS 1.1 handshake succeeded")
	}
}

// Over TLS the framing guard still sees HTTP/1.1 requests: an ambiguous
// one is refused and the connection closed, so a request behind it is
// never served. A client that connects and never handshakes holds up
// nobody else.
func TestEdgeTLSFramingAndStalledHandshake(t *testing.T) {
	g := jetwaytest.Start(t)
	g.Publish(`{"name":"tls.mock","pool":"p","route":{"path":"/m"},"backend":{"type":"mock","body":"mock"}}`)
	ca := jetwaytest.NewCA(t)
	now := time.Now()
	certs, err := edge.LoadCerts([]edge.CertFile{ca.Issue(t, t.TempDir(), 20, now.Add(-time.Minute), now.Add(time.Hour), "api.example.test")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := tlsEdge(t, g, certs)

	stalled, err := net.Dial("tcp", addr) // never says a word
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()

	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "api.example.test", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(conn, "POST /m HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /m HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("ambiguous framing over TLS: %d, want 400", resp.StatusCode)
	}
	if resp2, err := http.ReadResponse(br, nil); err == nil {
		resp2.Body.Close()
		t.Fatalf("the request behind it was served over TLS: %d", resp2.StatusCode)
	}
}

// A certificate rewritten on disk is served to new handshakes within the
// reload interval; a connection opened before keeps working. A pair that
// no longer loads (here: expired) keeps the previous certificate.
func TestEdgeTLSReload(t *testing.T) {
	g := jetwaytest.Start(t)
	g.Publish(`{"name":"tls.mock","pool":"p","route":{"path":"/m"},"backend":{"type":"mock","body":"mock"}}`)
	ca := jetwaytest.NewCA(t)
	dir := t.TempDir()
	now := time.Now()
	f := ca.Issue(t, dir, 30, now.Add(-time.Minute), now.Add(time.Hour), "api.example.test")
	certs, err := edge.LoadCerts([]edge.CertFile{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go certs.Watch(ctx, 20*time.Millisecond)
	addr := tlsEdge(t, g, certs)
	c := tlsClient(ca.Pool, "api.example.test", true)
	get := func() {
		t.Helper()
		resp, err := c.Get("https://" + addr + "/m")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET: %d", resp.StatusCode)
		}
	}
	get()
	served := func() int64 {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "api.example.test"})
		if err != nil {
			return -1
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}

	next := ca.Issue(t, t.TempDir(), 31, now.Add(-time.Minute), now.Add(time.Hour), "api.example.test")
	for _, p := range [][2]string{{next.Cert, f.Cert}, {next.Key, f.Key}} {
		b, _ := os.ReadFile(p[0])
		jetwaytest.WriteFile(t, p[1], b)
	}
	natstest.CheckFor(t, jetwaytest.Wait, 10*time.Millisecond, func() error {
		if s := served(); s != 31 {
			return fmt.Errorf("new handshakes get certificate %d, want 31", s)
		}
		return nil
	})
	get() // the HTTP/2 connection opened before still serves

	expired := ca.Issue(t, t.TempDir(), 32, now.Add(-2*time.Hour), now.Add(-time.Hour), "api.example.test")
	for _, p := range [][2]string{{expired.Cert, f.Cert}, {expired.Key, f.Key}} {
		b, _ := os.ReadFile(p[0])
		jetwaytest.WriteFile(t, p[1], b)
	}
	if err := certs.Reload(); err == nil || !strings.Contains(err.Error(), "not now") {
		t.Fatalf("reloading an expired certificate: %v", err)
	}
	if s := served(); s != 31 {
		t.Fatalf("after a bad reload new handshakes get %d, want the previous 31", s)
	}
}

// h2c: a plain listener under the framing guard may also speak HTTP/2
// with prior knowledge; HTTP/2 calls are served (and never told to close),
// and on the same listener HTTP/1.1 keeps its framing checks.
func TestH2CBesideTheFramingGuard(t *testing.T) {
	g := jetwaytest.Start(t)
	g.Publish(`{"name":"h2c.mock","pool":"p","route":{"path":"/m"},"backend":{"type":"mock","body":"mock"}}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: g.Edge, ConnContext: edge.ConnContext, DisableGeneralOptionsHandler: true, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(edge.GuardFraming(ln, 64<<10)) }()
	defer srv.Close()
	addr := ln.Addr().String()

	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for i := range 3 {
		resp, err := c.Get("http://" + addr + "/m")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != 200 || string(b) != "mock" || resp.Header.Get("Connection") != "" {
			t.Fatalf("h2c call %d: HTTP/%d %d %q %v", i, resp.ProtoMajor, resp.StatusCode, b, resp.Header)
		}
	}

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(conn, "POST /m HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("ambiguous HTTP/1.1 framing beside h2c: %d, want 400", resp.StatusCode)
	}
}

// flakyListener fails its first accepts with a temporary error, as a
// process out of file descriptors does.
type flakyListener struct {
	net.Listener
	fails atomic.Int64
}

type tempErr struct{}

func (tempErr) Error() string   { return "accept: too many open files" }
func (tempErr) Temporary() bool { return true }
func (tempErr) Timeout() bool   { return false }

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, tempErr{}
	}
	return l.Listener.Accept()
}

// A temporary accept error (EMFILE) pauses the TLS listener, never ends it.
func TestEdgeTLSOutlivesTemporaryAcceptErrors(t *testing.T) {
	g := jetwaytest.Start(t)
	g.Publish(`{"name":"tls.mock","pool":"p","route":{"path":"/m"},"backend":{"type":"mock","body":"mock"}}`)
	ca := jetwaytest.NewCA(t)
	now := time.Now()
	certs, err := edge.LoadCerts([]edge.CertFile{ca.Issue(t, t.TempDir(), 120, now.Add(-time.Minute), now.Add(time.Hour), "api.example.test")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: raw}
	fl.fails.Store(3)
	tl := edge.ListenTLS(fl, certs.TLSConfig(), 2*time.Second, 64<<10)
	srv := &http.Server{Handler: g.Edge, ConnContext: edge.ConnContext}
	go func() { _ = srv.Serve(tl.HTTP1()) }()
	go func() { _ = srv.Serve(tl.HTTP2()) }()
	defer srv.Close()
	resp, err := tlsClient(ca.Pool, "api.example.test", true).Get("https://" + raw.Addr().String() + "/m")
	if err != nil {
		t.Fatalf("after temporary accept errors: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("after temporary accept errors: %d", resp.StatusCode)
	}
}
