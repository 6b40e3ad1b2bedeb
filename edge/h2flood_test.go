package edge_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// h2Flooder is a raw HTTP/2 client connection that writes frames as an
// attacker would; the frames the server sends are read and counted, so
// it never blocks on a full window.
type h2Flooder struct {
	conn    *tls.Conn
	fr      *http2.Framer
	closed  chan struct{} // the server ended the connection
	goAway  chan http2.ErrCode
	headers []byte
}

func newFlooder(t *testing.T, addr string, ca *jetwaytest.CA) *h2Flooder {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "api.example.test", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if conn.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatal("no h2 negotiated")
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	f := &h2Flooder{conn: conn, fr: http2.NewFramer(conn, conn), closed: make(chan struct{}), goAway: make(chan http2.ErrCode, 1)}
	if err := f.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, kv := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "api.example.test"}, {":path", "/m"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	f.headers = hb.Bytes()
	go func() {
		defer close(f.closed)
		rd := http2.NewFramer(io.Discard, conn)
		for {
			fr, err := rd.ReadFrame()
			if err != nil {
				return
			}
			if ga, ok := fr.(*http2.GoAwayFrame); ok {
				select {
				case f.goAway <- ga.ErrCode:
				default:
				}
			}
		}
	}()
	return f
}

// h2Gateway is an edge over TLS with mock APIs at /m (flooded) and /o.
func h2Gateway(t *testing.T) (g *jetwaytest.Gateway, addr string, ca *jetwaytest.CA) {
	t.Helper()
	g = jetwaytest.Start(t)
	g.Publish(`{"name":"tls.mock","pool":"p","route":{"path":"/m"},"backend":{"type":"mock","body":"mock"}}`)
	g.Publish(`{"name":"tls.other","pool":"p","route":{"path":"/o"},"backend":{"type":"mock","body":"mock"}}`)
	ca = jetwaytest.NewCA(t)
	now := time.Now()
	certs, err := edge.LoadCerts([]edge.CertFile{ca.Issue(t, t.TempDir(), 50, now.Add(-time.Minute), now.Add(time.Hour), "api.example.test")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g, tlsEdge(t, g, certs), ca
}

// others checks that another client's calls of path keep working, each
// within a second.
func others(t *testing.T, addr string, ca *jetwaytest.CA, path string, n int) {
	t.Helper()
	c := tlsClient(ca.Pool, "api.example.test", true)
	for i := range n {
		start := time.Now()
		resp, err := c.Get("https://" + addr + path)
		if err != nil {
			t.Fatalf("call %d of another client during the flood: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "mock" || time.Since(start) > time.Second {
			t.Fatalf("call %d of another client during the flood: %d %q after %v", i, resp.StatusCode, b, time.Since(start))
		}
	}
}

// Rapid reset (CVE-2023-44487): a client that opens streams and cancels
// each at once, twenty thousand times, gets no more handlers at once than
// the stream limit (Go's HTTP/2 server), leaves nothing in flight behind,
// and other clients' calls of other APIs go on being served meanwhile. The
// flooded API itself may refuse others with OVERLOADED while the flood
// fills its worker concurrency, as many HTTP/1.1 connections would: the
// per-caller defence is a rate limit keyed by ip or app. Right after, one
// call in ten at least is served: the edge sheds at most nine in ten
// however hard the flood drove its share, and stops within about a
// window (TestShedCapRecoversFromAFlood); a stream reset before the edge
// decided on it counts for nothing (TestShedSkipsCallersGone).
func TestH2RapidResetFlood(t *testing.T) {
	g, addr, ca := h2Gateway(t)
	f := newFlooder(t, addr, ca)
	done := make(chan error, 1)
	go func() {
		for i := range 20000 {
			id := uint32(2*i + 1)
			if err := f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: f.headers, EndStream: true, EndHeaders: true}); err != nil {
				done <- err
				return
			}
			if err := f.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	others(t, addr, ca, "/o", 20)
	select {
	case err := <-done:
		select {
		case code := <-f.goAway:
			t.Logf("the server sent GOAWAY %v; the flood's writes ended with %v", code, err)
		default:
			t.Logf("the flood's writes ended with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the flood did not finish writing")
	}
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if n := g.Edge.InFlight(); n != 0 {
			return fmt.Errorf("%d calls still in flight after the flood", n)
		}
		return nil
	})
	natstest.CheckFor(t, 2*time.Second, 10*time.Millisecond, func() error {
		resp, err := tlsClient(ca.Pool, "api.example.test", true).Get("https://" + addr + "/m")
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("the flooded API answers %d %s after the flood", resp.StatusCode, b)
		}
		return nil
	})
}

// CONTINUATION flood (CVE-2023-45288): a header block that never ends is
// cut off once it passes the header limit (--max-header-bytes), the
// connection closed, rather than read and decoded without end; other
// clients are served meanwhile.
func TestH2ContinuationFlood(t *testing.T) {
	_, addr, ca := h2Gateway(t)
	f := newFlooder(t, addr, ca)
	var junk bytes.Buffer
	enc := hpack.NewEncoder(&junk)
	for i := 0; junk.Len() < 15<<10; i++ {
		_ = enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-junk-%d", i), Value: strings.Repeat("a", 200)})
	}
	if err := f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: f.headers, EndHeaders: false}); err != nil {
		t.Fatal(err)
	}
	sent := 0
	var werr error
	for sent < 64<<20 { // 64 MiB, a thousand times the limit
		if werr = f.fr.WriteContinuation(1, false, junk.Bytes()); werr != nil {
			break
		}
		sent += junk.Len()
		select {
		case <-f.closed:
			werr = errors.New("closed by the server")
		default:
		}
		if werr != nil {
			break
		}
	}
	if werr == nil {
		t.Fatalf("the server read %d MiB of one header block without closing the connection", sent>>20)
	}
	if sent > 16<<20 { // what the sockets buffer passes before the reset arrives
		t.Errorf("the server read %d KiB of one header block before closing, want about the 64 KiB limit", sent>>10)
	}
	t.Logf("connection ended after %d KiB of CONTINUATION frames: %v", sent>>10, werr)
	others(t, addr, ca, "/m", 5)
}
