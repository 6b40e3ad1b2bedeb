package edge_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/edge"
)

// A pool whose workers the heartbeats say are live, but that has no
// subscriber for a moment (its workers reconnecting after their NATS node
// died): an idempotent call waits the moment out and is answered; a call
// that may not be sent twice, or one to a pool nobody serves, is answered
// NO_WORKERS at once.
func TestIdempotentCallWaitsOutAWorkerGap(t *testing.T) {
	g := newGatewayWith(t, edge.Options{Serving: func(pool string) bool { return pool == "gap" }}, "other")
	g.Publish(`{"name":"gap.get","pool":"gap","route":{"method":"GET","path":"/gap"},"timeout":"3s","backend":{"type":"mock","body":"x"}}`)
	g.Publish(`{"name":"gap.post","pool":"gap","route":{"method":"POST","path":"/gap"},"timeout":"3s","backend":{"type":"mock","body":"x"}}`)
	g.Publish(`{"name":"none.get","pool":"none","route":{"method":"GET","path":"/none"},"timeout":"3s","backend":{"type":"mock","body":"x"}}`)

	start := time.Now()
	if r := g.Do("POST", "/gap", strings.NewReader("x")); r.Code != "NO_WORKERS" || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("POST: %d %s after %s, want NO_WORKERS at once", r.Status, r.Body, time.Since(start))
	}
	start = time.Now()
	if r := g.Do("GET", "/none", nil); r.Code != "NO_WORKERS" || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("GET of a pool nobody serves: %d %s after %s, want NO_WORKERS at once", r.Status, r.Body, time.Since(start))
	}

	// A stand-in worker subscribes 150 ms into the call.
	time.AfterFunc(150*time.Millisecond, func() {
		_, _ = g.Conn.QueueSubscribe(bus.APISubject("gap", "gap.get"), bus.QueueGroup("gap"), func(m *nats.Msg) {
			_ = m.RespondMsg(&nats.Msg{Header: bus.EncodeReply(nats.Header{}, http.StatusOK), Data: []byte("back")})
		})
	})
	start = time.Now()
	r := g.Do("GET", "/gap", nil)
	if r.Status != http.StatusOK || r.Body != "back" {
		t.Fatalf("GET through the gap: %d %s after %s", r.Status, r.Body, time.Since(start))
	}
	t.Logf("answered %s after the call, through a 150ms gap", time.Since(start).Round(time.Millisecond))
}
