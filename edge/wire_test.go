package edge_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// The edge writes requests in the version its chooser gives: this
// release's without one, the oldest it reads while it has not heard the
// workers. A worker a release apart that refuses the version says which
// it reads, and the edge writes the call again, once, in one both read;
// when they share none the caller gets 502 WIRE_VERSION.
func TestEdgeWireVersions(t *testing.T) {
	g := jetwaytest.Start(t, "none") // no worker serves pool "x": the test answers
	g.Publish(`{"name":"wire.v","pool":"x","route":{"path":"/w"},"backend":{"type":"mock"}}`)
	var reads atomic.Value // what the test's worker reads: "2-3" or "3-4"
	reads.Store("2-3")
	var asked atomic.Int64
	seen := make(chan []string, 8)
	sub, err := g.Conn.Subscribe(bus.APISubject("x", "wire.v"), func(m *nats.Msg) {
		asked.Add(1)
		seen <- m.Header[bus.HdrWire]
		if r := reads.Load().(string); m.Header.Get(bus.HdrWire) != r[:1] {
			refusal := bus.ErrorReply(bus.CodeWireVersion, "this worker reads "+r, "")
			refusal.Header[bus.HdrWireReads] = []string{r}
			_ = m.RespondMsg(refusal)
			return
		}
		_ = m.RespondMsg(&nats.Msg{Header: nats.Header{bus.HdrStatus: {"200"}}, Data: []byte("ok")})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := g.Conn.Flush(); err != nil {
		t.Fatal(err)
	}

	if r := g.Do(http.MethodGet, "/w", nil); r.Status != http.StatusOK || r.Body != "ok" || asked.Load() != 1 {
		t.Errorf("a call: %d %q after %d requests", r.Status, r.Body, asked.Load())
	}
	if got := <-seen; len(got) != 1 || got[0] != "2" {
		t.Errorf("request written in version %q, want 2", got)
	}

	// An edge that has not heard the workers yet writes the oldest
	// version, no header, as the previous release; refused, it writes
	// the call again in version 2.
	url, _, _ := g.AddEdge(t, edge.Options{Wire: bus.NewWireVersions()})
	if r := jetwaytest.Do(t, url, http.MethodGet, "/w", nil); r.Status != http.StatusOK || asked.Load() != 3 {
		t.Errorf("a call refused for its version: %d %s after %d requests", r.Status, r.Body, asked.Load())
	}
	if first, again := <-seen, <-seen; first != nil || len(again) != 1 || again[0] != "2" {
		t.Errorf("written in %q, then in %q; want none, then 2", first, again)
	}

	reads.Store("3-4") // no version in common
	if r := g.Do(http.MethodGet, "/w", nil); r.Status != http.StatusBadGateway || r.Code != "WIRE_VERSION" || asked.Load() != 4 {
		t.Errorf("a worker reading no version of ours: %d %s after %d requests", r.Status, r.Body, asked.Load())
	}
}
