package edge_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// A worker (or anything answering an API's subject) that names a reply
// subject outside the ack inbox of its stream's head — the KV API, another
// call's inbox — never gets the edge to publish there: the edge answers
// only under the head's <worker inbox>.h base.
func TestStreamAnswersOnlyTheAckInbox(t *testing.T) {
	g := jetwaytest.Start(t, "nobody") // no worker of pool p: the test answers itself
	g.Publish(`{"name":"s","pool":"p","route":{"method":"POST","path":"/s"},"backend":{"type":"grpc","target":"h:1","method":"a.B/C"}}`)
	victim, err := g.Conn.SubscribeSync("$KV.jetway_apps.victim")
	if err != nil {
		t.Fatal(err)
	}
	acks, err := g.Conn.SubscribeSync(bus.InboxPrefixWorker + ".fake.*")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := g.Conn.Subscribe(bus.APISubject("p", "s"), func(m *nats.Msg) {
		h := nats.Header{}
		bus.EncodeReply(h, 200)
		h[bus.HdrStream] = []string{bus.StreamOpen}
		_ = g.Conn.PublishMsg(&nats.Msg{Subject: m.Reply, Reply: bus.InboxPrefixWorker + ".fake.h", Header: h})
		data := nats.Header{bus.HdrStream: {bus.StreamData}}
		for i := 1; i <= 16; i++ {
			reply := ""
			switch i {
			case 8:
				reply = "$KV.jetway_apps.victim" // a hostile ack subject
			case 16:
				reply = bus.InboxPrefixWorker + ".fake.16"
			}
			_ = g.Conn.PublishMsg(&nats.Msg{Subject: m.Reply, Reply: reply, Header: data, Data: []byte("x\n")})
		}
		_ = g.Conn.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{bus.HdrStream: {bus.StreamEnd}}})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	g.Conn.Flush()
	r := g.Do(http.MethodPost, "/s", strings.NewReader(`{}`), "Accept", "application/x-ndjson")
	if r.Status != 200 || strings.Count(r.Body, "x\n") != 16 {
		t.Fatalf("stream: %d %q", r.Status, r.Body)
	}
	if m, err := acks.NextMsg(2 * time.Second); err != nil || m.Subject != bus.InboxPrefixWorker+".fake.16" || string(m.Data) != "16" {
		t.Fatalf("the ack in the ack inbox: %v %v", m, err)
	}
	if m, err := victim.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("the edge published %q on %s", m.Data, m.Subject)
	}
}
