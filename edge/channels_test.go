package edge_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/otel"
)

// The edge counts the calls of an API with a channel set by the channel
// that answered (the worker's X-Jetway-Channel) and the edge's own
// verdict; a name the API's entry does not list counts as "other"; and
// the channels' states come from their controller's events.
func TestChannelMetrics(t *testing.T) {
	g := newGateway(t, "p")
	// b fails; no failover and no cut (the window never holds enough
	// calls), so each call is answered by the channel it was sent to.
	g.Publish(`{"name":"sms","pool":"p","route":{"path":"/sms"},"channel_policy":{"failover":"never","min_volume":1000000},
		"channels":[{"name":"a","backend":{"type":"mock","body":"a"}},{"name":"b","backend":{"type":"mock","status":503}}]}`)
	want := map[string]int{}
	for range 40 {
		r := g.Do("GET", "/sms", nil)
		ch := r.Header.Get("X-Jetway-Channel")
		switch {
		case ch == "a" && r.Status == 200:
			want["a ok"]++
		case ch == "b" && r.Status == 503:
			want["b failed"]++
		default:
			t.Fatalf("answer %d from channel %q: %s", r.Status, ch, r.Body)
		}
	}
	if want["a ok"] == 0 || want["b failed"] == 0 {
		t.Fatalf("the calls did not spread over both channels: %v", want)
	}

	// A stand-in worker of pool fp (no real one serves it) answers naming
	// channels its API's entry does and does not list.
	g.Publish(`{"name":"forged","pool":"fp","route":{"path":"/forged"},
		"channels":[{"name":"a","backend":{"type":"mock"}},{"name":"b","backend":{"type":"mock"}}]}`)
	if _, err := g.Conn.QueueSubscribe(bus.APISubject("fp", "forged"), bus.QueueGroup("fp"), func(m *nats.Msg) {
		ch := m.Header.Get("X-Test-Channel")
		_ = m.RespondMsg(&nats.Msg{Header: bus.EncodeReply(nats.Header{"X-Jetway-Channel": {ch}}, http.StatusOK), Data: []byte("x")})
	}); err != nil {
		t.Fatal(err)
	}
	_ = g.Conn.Flush()
	for _, ch := range []string{"b", "zz", "other", strings.Repeat("x", 5000)} {
		if r := g.Do("GET", "/forged", nil, "X-Test-Channel", ch); r.Status != 200 {
			t.Fatalf("forged %q: %d %s", ch, r.Status, r.Body)
		}
	}

	// The channels' states, as an edge follows them (its SLA recorder's
	// connection), from events a worker of the pool publishes.
	js, err := jetstream.New(g.Conn)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := otel.StartSLARecorder(g.Metrics, otel.SLAOptions{JS: js, Node: "test-edge", Breakers: g.Conn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Stop(t.Context()) })
	event := func(tok, ch, to string, share float64) {
		b, _ := json.Marshal(map[string]any{"api": "forged", "channel": ch, "from": "available", "to": to, "share": share,
			"by": "controller", "reason": "test", "at": time.Now()})
		if err := g.Conn.Publish(bus.ChannelEventPrefix+tok+".forged", b); err != nil {
			t.Fatal(err)
		}
	}
	event("fp", "a", "cut", 0)
	event("fp", "b", "ramping", 0.25)
	event("p", "b", "cut", 0) // another pool's worker speaking for forged: not shown

	l := `api="sms",pool="p",node="test-edge",role="edge"`
	f := `api="forged",pool="fp",node="test-edge",role="edge"`
	lines := []string{
		fmt.Sprintf(`jetway_channel_requests_total{%s,channel="a",outcome="ok"} %d`, l, want["a ok"]),
		fmt.Sprintf(`jetway_channel_requests_total{%s,channel="b",outcome="failed"} %d`, l, want["b failed"]),
		`jetway_channel_requests_total{` + l + `,channel="b",outcome="ok"} 0`,
		`jetway_channel_requests_total{` + f + `,channel="b",outcome="ok"} 1`,
		`jetway_channel_requests_total{` + f + `,channel="other",outcome="ok"} 3`,
		`jetway_channel_state{` + f + `,channel="a",state="cut"} 1`,
		`jetway_channel_state{` + f + `,channel="a",state="available"} 0`,
		`jetway_channel_state{` + f + `,channel="b",state="ramping"} 1`,
		`jetway_channel_share{` + f + `,channel="b"} 0.25`,
		`jetway_requests_succeeded_total{` + l + fmt.Sprintf(`} %d`, want["a ok"]),
	}
	var out string
	natstest.CheckFor(t, 3*time.Second, 10*time.Millisecond, func() error {
		var b strings.Builder
		if err := g.Metrics.WritePrometheus(&b); err != nil {
			return err
		}
		out = b.String()
		for _, want := range lines {
			if !strings.Contains(out, want+"\n") {
				return fmt.Errorf("missing %q in\n%s", want, out)
			}
		}
		return nil
	})
	for _, bad := range []string{`channel="zz"`, `channel="xxx`, `jetway_channel_state{` + f + `,channel="b",state="cut"} 1`} {
		if strings.Contains(out, bad) {
			t.Errorf("exposition has %s", bad)
		}
	}

	// The per-second records carry the calls by channel (what jetway top reads).
	got := map[string]otel.ChannelCalls{}
	for _, r := range g.Metrics.Tick(time.Now().Add(time.Second)) {
		for _, c := range r.Channels {
			got[r.API+" "+c.Channel] = c
		}
	}
	if got["sms a"].OK != int64(want["a ok"]) || got["sms b"].Failed != int64(want["b failed"]) || got["forged other"].OK != 3 {
		t.Fatalf("records' channels %+v, want %v", got, want)
	}
}
