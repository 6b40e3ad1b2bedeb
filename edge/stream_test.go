package edge_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// fakeWorker answers an API's subject itself, as a worker would, and
// notes whether each request was offered a stream.
type fakeWorker struct {
	mu      sync.Mutex
	offered []bool
}

func (f *fakeWorker) offers() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]bool(nil), f.offered...)
}

func serveFake(t *testing.T, g *jetwaytest.Gateway, api string, answer func(m *nats.Msg)) *fakeWorker {
	t.Helper()
	f := &fakeWorker{}
	sub, err := g.Conn.Subscribe(bus.APISubject("p", api), func(m *nats.Msg) {
		f.mu.Lock()
		f.offered = append(f.offered, bus.StreamWindowOf(m.Header) > 0 && bus.IsStreamInbox(m.Reply))
		f.mu.Unlock()
		answer(m)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := g.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	return f
}

// oneReply answers with one reply of the status, and the fallback header
// when fallback is set.
func oneReply(g *jetwaytest.Gateway, status int, fallback string) func(m *nats.Msg) {
	return func(m *nats.Msg) {
		h := nats.Header{"Content-Type": {"application/json"}}
		if fallback != "" {
			h["X-Jetway-Fallback"] = []string{fallback}
		}
		bus.EncodeReply(h, status)
		_ = g.Conn.PublishMsg(&nats.Msg{Subject: m.Reply, Header: h, Data: []byte(`{"ok":true}`)})
	}
}

// A gRPC API's call asking for a JSON array is offered a stream (its
// method may stream from the server) until one comes back as a single
// 200 reply that is not a fallback's: a unary method's, which then goes as
// one request and one reply, without the stream's subscriptions. NDJSON
// and SSE are always offered one; so is nothing on a route that rewrites
// response bodies (it needs the answer whole).
func TestArrayStreamOffered(t *testing.T) {
	g := jetwaytest.Start(t, "nobody") // no worker of pool p: the test answers itself
	for _, api := range []string{"unary", "fallback", "failing"} {
		g.Publish(`{"name":"` + api + `","pool":"p","route":{"method":"POST","path":"/` + api + `"},"backend":{"type":"grpc","target":"h:1","method":"a.B/C"}}`)
	}
	g.Publish(`{"name":"rewritten","pool":"p","route":{"method":"POST","path":"/rewritten"},"rewrite":{"response":{"body":{"remove":["/a"]}}},
		"backend":{"type":"grpc","target":"h:1","method":"a.B/C"}}`)
	unary := serveFake(t, g, "unary", oneReply(g, 200, ""))
	fallback := serveFake(t, g, "fallback", oneReply(g, 200, "static"))
	failing := serveFake(t, g, "failing", oneReply(g, 503, ""))
	rewritten := serveFake(t, g, "rewritten", oneReply(g, 200, ""))
	call := func(path, accept string) {
		t.Helper()
		r := g.Do(http.MethodPost, path, strings.NewReader(`{}`), "Accept", accept)
		if r.Status != 200 && r.Status != 503 {
			t.Fatalf("%s: %d %s", path, r.Status, r.Body)
		}
	}
	for _, path := range []string{"/unary", "/fallback", "/failing", "/rewritten"} {
		call(path, "")
		call(path, "")
		call(path, "application/x-ndjson")
		call(path, "application/json")
	}
	for _, c := range []struct {
		name string
		f    *fakeWorker
		want []bool
	}{
		{"a unary method", unary, []bool{true, false, true, false}},
		{"a fallback's answer", fallback, []bool{true, true, true, true}},
		{"an error", failing, []bool{true, true, true, true}},
		{"a response body rewrite", rewritten, []bool{false, false, true, false}},
	} {
		if got := c.f.offers(); jsonOf(got) != jsonOf(c.want) {
			t.Errorf("%s: streams offered %v, want %v", c.name, got, c.want)
		}
	}
}

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }

// The edge frames a relayed JSON array: "[", commas, "]"; a stream its
// worker ends with an error (whatever code it names) ends with an element
// saying BAD_GATEWAY, so that a cut array is never taken for a whole one.
func TestArrayStreamFraming(t *testing.T) {
	g := jetwaytest.Start(t, "nobody")
	g.Publish(`{"name":"s","pool":"p","route":{"method":"POST","path":"/s"},"backend":{"type":"grpc","target":"h:1","method":"a.B/C"}}`)
	var endCode string
	var mu sync.Mutex
	serveFake(t, g, "s", func(m *nats.Msg) {
		h := nats.Header{"Content-Type": {"application/json"}}
		bus.EncodeReply(h, 200)
		h[bus.HdrStream] = []string{bus.StreamOpen}
		_ = g.Conn.PublishMsg(&nats.Msg{Subject: m.Reply, Reply: bus.InboxPrefixWorker + ".fake.h", Header: h})
		for _, el := range []string{`{"a":1}`, `{"a":2}`} {
			_ = g.Conn.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{bus.HdrStream: {bus.StreamData}}, Data: []byte(el)})
		}
		end := nats.Header{bus.HdrStream: {bus.StreamEnd}}
		mu.Lock()
		if endCode != "" {
			end[bus.HdrError] = []string{endCode}
		}
		mu.Unlock()
		_ = g.Conn.PublishMsg(&nats.Msg{Subject: m.Reply, Header: end})
	})
	r := g.Do(http.MethodPost, "/s", strings.NewReader(`{}`))
	if r.Status != 200 || r.Body != `[{"a":1},{"a":2}]` || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("a whole array: %d %v %q", r.Status, r.Header, r.Body)
	}
	mu.Lock()
	endCode = "SOMETHING_ELSE"
	mu.Unlock()
	r = g.Do(http.MethodPost, "/s", strings.NewReader(`{}`))
	var els []map[string]any
	if r.Status != 200 || json.Unmarshal([]byte(r.Body), &els) != nil || len(els) != 3 || !strings.Contains(r.Body, `{"error":{"code":"BAD_GATEWAY"`) {
		t.Fatalf("an array its worker broke off: %d %q", r.Status, r.Body)
	}
}
