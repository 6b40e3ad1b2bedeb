package push_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/push"
	"github.com/jetway-gw/jetway/push/pushclient"
)

// rawTCP is a client of the push TCP listener that writes and reads
// frames itself.
type rawTCP struct {
	t *testing.T
	c net.Conn
}

func dialRaw(t *testing.T, addr string) *rawTCP {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(addr, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawTCP{t: t, c: c}
}

func (r *rawTCP) send(obj string) {
	r.t.Helper()
	if _, err := r.c.Write(push.AppendFrame(nil, []byte(obj))); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawTCP) connect(path string, headers map[string]string) {
	r.t.Helper()
	b, _ := json.Marshal(map[string]any{"type": "connect", "path": path, "headers": headers})
	r.send(string(b))
}

// read returns the next frame as an object; nil when the edge has closed
// the connection.
func (r *rawTCP) read() map[string]any {
	r.t.Helper()
	b, err := push.ReadFrame(r.c, 1<<20)
	if err != nil {
		return nil
	}
	var f map[string]any
	if err := json.Unmarshal(b, &f); err != nil {
		r.t.Fatalf("a frame that is not JSON: %q", b)
	}
	return f
}

// Every refusal of a TCP subscription is an error frame with the status
// and code an HTTP caller gets, then the end of the connection; only
// /_jetway/tcp/ is served over the listener, and the tcp endpoint only
// over it.
func TestTCPRefusals(t *testing.T) {
	g, _, shop := start(t)
	addr := jetwaytest.ServeTCP(t, g.Edge)
	key := map[string]string{"X-Api-Key": shop}
	for _, c := range []struct {
		name   string
		first  string // a raw first frame, or
		path   string // a connect frame's path
		hdr    map[string]string
		status int
		code   string
	}{
		{"no credentials", "", "/_jetway/tcp/orders", nil, 401, "UNAUTHENTICATED"},
		{"bad key", "", "/_jetway/tcp/orders", map[string]string{"X-Api-Key": "jw_nope"}, 401, "UNAUTHENTICATED"},
		{"unknown topic", "", "/_jetway/tcp/nope", key, 404, "TOPIC_NOT_FOUND"},
		{"foreign origin", "", "/_jetway/tcp/orders", map[string]string{"X-Api-Key": shop, "Origin": "https://evil.example"}, 403, "FORBIDDEN"},
		{"bad cursor", "", "/_jetway/tcp/orders?after=x:1", key, 400, "BAD_REQUEST"},
		{"bad device", "", "/_jetway/tcp/orders?device=a.b", key, 400, "BAD_REQUEST"},
		{"an API's path", "", "/orders", key, 400, "BAD_REQUEST"},
		{"another endpoint", "", "/_jetway/sse/orders", key, 400, "BAD_REQUEST"},
		{"a publish", "", "/_jetway/tcp/../publish/orders", key, 400, "BAD_REQUEST"},
		{"escaped out of tcp", "", "/_jetway/tcp/%2e%2e/publish/orders", key, 400, "BAD_REQUEST"},
		{"an empty segment", "", "/_jetway/tcp//publish/orders", key, 400, "BAD_REQUEST"},
		{"a forwarded address", "", "/_jetway/tcp/orders", map[string]string{"X-Api-Key": shop, "X-Forwarded-For": "10.0.0.1"}, 400, "BAD_REQUEST"},
		{"a header with CRLF", "", "/_jetway/tcp/orders", map[string]string{"X-Api-Key": shop + "\r\nX-Evil: 1"}, 400, "BAD_REQUEST"},
		{"not JSON", "hello", "", nil, 400, "BAD_REQUEST"},
		{"not a connect", `{"type":"ping"}`, "", nil, 400, "BAD_REQUEST"},
		{"an unknown field", `{"type":"connect","path":"/_jetway/tcp/orders","headers":{},"user":"root"}`, "", nil, 400, "BAD_REQUEST"},
		{"two objects", `{"type":"connect","path":"/_jetway/tcp/orders","headers":{}} {}`, "", nil, 400, "BAD_REQUEST"},
	} {
		r := dialRaw(t, addr)
		if c.first != "" {
			r.send(c.first)
		} else {
			r.connect(c.path, c.hdr)
		}
		f := r.read()
		if f == nil || f["type"] != "error" || f["status"] != float64(c.status) || f["code"] != c.code || f["message"] == "" {
			t.Errorf("%s: %v", c.name, f)
			continue
		}
		if more := r.read(); more != nil {
			t.Errorf("%s: a frame after the refusal: %v", c.name, more)
		}
	}
	// A first frame over 64 KiB is refused unread.
	r := dialRaw(t, addr)
	_, _ = r.c.Write(binary.BigEndian.AppendUint32(nil, push.MaxInboundFrame+1))
	if f := r.read(); f == nil || f["status"] != float64(413) {
		t.Errorf("a large first frame: %v", f)
	}
	// The tcp endpoint is not an HTTP one.
	if res := g.Do("GET", "/_jetway/tcp/orders", nil, "X-Api-Key", shop); res.Status != 404 || res.Code != "ROUTE_NOT_FOUND" {
		t.Errorf("tcp over HTTP: %d %s", res.Status, res.Body)
	}
	// pushclient reads the refusal as an HTTP one.
	_, err := pushclient.Dial(context.Background(), pushclient.Options{Edge: addr, Topic: "orders", Transport: "tcp"})
	var he *pushclient.HTTPError
	if !errors.As(err, &he) || he.Status != 401 || he.Code != "UNAUTHENTICATED" {
		t.Errorf("pushclient: %v", err)
	}
}

// A client frame over 64 KiB closes with 1009, one that is not JSON with
// 1007, each after the frames before it were delivered.
func TestTCPFrameLimits(t *testing.T) {
	g, _, shop := start(t)
	addr := jetwaytest.ServeTCP(t, g.Edge)
	for _, c := range []struct {
		name  string
		frame []byte
		code  float64
	}{
		{"too large", binary.BigEndian.AppendUint32(nil, push.MaxInboundFrame+1), 1009},
		{"not JSON", push.AppendFrame(nil, []byte("{not json")), 1007},
	} {
		r := dialRaw(t, addr)
		r.connect("/_jetway/tcp/orders", map[string]string{"X-Api-Key": shop})
		if f := r.read(); f == nil || f["type"] != "ready" {
			t.Fatalf("%s: %v", c.name, f)
		}
		if _, err := r.c.Write(c.frame); err != nil {
			t.Fatal(err)
		}
		if f := r.read(); f == nil || f["type"] != "close" || f["code"] != c.code {
			t.Errorf("%s: %v", c.name, f)
		}
		if f := r.read(); f != nil {
			t.Errorf("%s: a frame after the close: %v", c.name, f)
		}
	}
}

// An idle TCP connection is pinged; one that answers stays, one that
// does not is closed within the write timeout.
func TestTCPPingPong(t *testing.T) {
	g := jetwaytest.StartWith(t, jetwaytest.Options{Push: push.Options{Ping: 300 * time.Millisecond, WriteTimeout: 500 * time.Millisecond}})
	g.PutTopic(topic)
	shop := g.PutKeyedApp("shop")
	addr := jetwaytest.ServeTCP(t, g.Edge)
	answers, silent := dialRaw(t, addr), dialRaw(t, addr)
	for _, r := range []*rawTCP{answers, silent} {
		r.connect("/_jetway/tcp/orders", map[string]string{"X-Api-Key": shop})
		if f := r.read(); f == nil || f["type"] != "ready" {
			t.Fatal(f)
		}
	}
	closed := make(chan time.Time, 1)
	go func() {
		for silent.read() != nil {
		}
		closed <- time.Now()
	}()
	pings := 0
	for pings < 5 {
		f := answers.read()
		if f == nil {
			t.Fatalf("the client that answers was closed after %d pings", pings)
		}
		if f["type"] == "ping" {
			pings++
			answers.send(`{"type":"pong"}`)
		}
	}
	select {
	case <-closed:
	default:
		t.Fatal("the client that never answers a ping is still connected")
	}
	if st := g.Push.Stats(); st.Connections != 1 {
		t.Errorf("%d connections, want the one that answers", st.Connections)
	}
	waitMetric(t, g.Push, disconnects("ping_timeout"), 1)
}
