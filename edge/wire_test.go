package edge_test

import (
	"net/http"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// The edge writes requests in the version its chooser gives: this
// release's without one, the oldest it reads while it has not heard the
// workers. A worker's WIRE_VERSION refusal reaches the caller as 502.
func TestEdgeWireVersions(t *testing.T) {
	g := jetwaytest.Start(t, "none") // no worker serves pool "x": the test answers
	g.Publish(`{"name":"wire.v","pool":"x","route":{"path":"/w"},"backend":{"type":"mock"}}`)
	asked := make(chan nats.Header, 4)
	sub, err := g.Conn.Subscribe(bus.APISubject("x", "wire.v"), func(m *nats.Msg) {
		asked <- m.Header
		if m.Header.Get(bus.HdrWire) == "" {
			_ = m.RespondMsg(bus.ErrorReply(bus.CodeWireVersion, "this worker reads versions 2 to 3", ""))
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

	if r := g.Do(http.MethodGet, "/w", nil); r.Status != http.StatusOK || r.Body != "ok" {
		t.Errorf("a call: %d %q", r.Status, r.Body)
	}
	if got := (<-asked).Get(bus.HdrWire); got != "2" {
		t.Errorf("request written in version %q, want 2", got)
	}

	// An edge that has not heard the workers yet writes the oldest
	// version: no header, as the previous release.
	url, _, _ := g.AddEdge(t, edge.Options{Wire: bus.NewWireVersions()})
	if r := jetwaytest.Do(t, url, http.MethodGet, "/w", nil); r.Status != http.StatusBadGateway || r.Code != "WIRE_VERSION" {
		t.Errorf("a refused version: %d %s", r.Status, r.Body)
	}
	if got := (<-asked)[bus.HdrWire]; got != nil {
		t.Errorf("a new chooser's request carries version %q", got)
	}
}
