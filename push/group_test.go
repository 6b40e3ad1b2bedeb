package push_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/push"
	"github.com/jetway-gw/jetway/push/pushclient"
)

// startGroups is start with a topic "jobs" whose apps may consume it in
// group "workers", with the ack wait and deliveries given.
func startGroups(t *testing.T, ackWait string, maxDeliver int) (g *jetwaytest.Gateway, pub, shop string) {
	g, pub, shop = start(t)
	g.PutTopic(fmt.Sprintf(`{"name":"jobs","publish":["pub"],"subscribe":["*"],"groups":{"names":["workers"],"ack_wait":%q,"max_deliver":%d}}`, ackWait, maxDeliver))
	return g, pub, shop
}

func publishTo(t *testing.T, g *jetwaytest.Gateway, key, topic, query, data string) {
	t.Helper()
	if r := g.Do("POST", "/_jetway/publish/"+topic+query, strings.NewReader(data), "X-Api-Key", key); r.Status != 200 {
		t.Fatalf("publish %s: %d %s", data, r.Status, r.Body)
	}
}

// member dials a group connection and reads its ready event.
func member(t *testing.T, edgeURL, transport, key string, prefetch int) *pushclient.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pushclient.Dial(ctx, pushclient.Options{Edge: edgeURL, Topic: "jobs", Transport: transport, Header: http.Header{"X-Api-Key": {key}}, Group: "workers", Prefetch: prefetch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
		t.Fatalf("%+v %v", ev, err)
	}
	return c
}

// Each message for the app goes to one member of its group — over either
// connection transport, on either edge — and none twice when each is
// acked; messages to another app reach none.
func TestGroupSharesMessages(t *testing.T) {
	g, pub, shop := startGroups(t, "30s", 5)
	edge2, _, e2 := g.AddEdge(t, edgeOptions())
	_ = edge2
	a := member(t, g.URL, "ws", shop, 1)
	b := member(t, jetwaytest.ServeTCP(t, e2), "tcp", shop, 1)
	// Both members' pulls are at the server before the first message.
	js, _ := jetstream.New(g.Conn)
	natstestCheck(t, 10*time.Second, func() error {
		c, err := js.Consumer(context.Background(), bus.PushDurable.Stream, push.GroupConsumer("jobs", "shop", "workers"))
		if err != nil {
			return err
		}
		info, err := c.Info(context.Background())
		if err != nil || info.NumWaiting < 2 {
			return fmt.Errorf("%d pulls waiting (%v)", info.NumWaiting, err)
		}
		return nil
	})
	const n = 20
	for i := range n {
		q := ""
		if i%2 == 1 {
			q = "?to=app&app=shop"
		}
		publishTo(t, g, pub, "jobs", q, fmt.Sprint("job", i))
	}
	publishTo(t, g, pub, "jobs", "?to=app&app=other", "not for shop")
	got := map[string]string{}
	per := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events := make(chan [2]string, 2*n)
	for name, c := range map[string]*pushclient.Conn{"a": a, "b": b} {
		go func() {
			for {
				ev, err := c.Next(ctx)
				if err != nil {
					return
				}
				if ev.Type != "message" {
					continue
				}
				if ev.Receipt == "" || ev.Attempt != 1 {
					t.Errorf("%s: %+v", name, ev)
				}
				if err := c.AckReceipt(ctx, ev.Receipt); err != nil {
					t.Error(err)
				}
				events <- [2]string{name, ev.Data}
			}
		}()
	}
	for len(got) < n {
		select {
		case e := <-events:
			if by, dup := got[e[1]]; dup {
				t.Fatalf("%s delivered to %s and %s", e[1], by, e[0])
			}
			got[e[1]] = e[0]
			per[e[0]]++
		case <-ctx.Done():
			t.Fatalf("got %d of %d: %v", len(got), n, got)
		}
	}
	select {
	case e := <-events:
		t.Fatalf("one more: %v", e)
	case <-time.After(300 * time.Millisecond):
	}
	if per["a"] == 0 || per["b"] == 0 {
		t.Errorf("one member took everything: %v", per)
	}
}

// A message not acked within the ack wait comes again; past max_deliver
// deliveries it becomes a dead letter in the stream, and comes no more.
func TestGroupRedeliveryAndDeadLetter(t *testing.T) {
	g, pub, shop := startGroups(t, "1s", 2)
	c := member(t, g.URL, "ws", shop, 1)
	publishTo(t, g, pub, "jobs", "", "poison")
	for attempt := uint64(1); attempt <= 2; attempt++ {
		ev := next(t, c)
		if ev.Data != "poison" || ev.Attempt != attempt {
			t.Fatalf("delivery %d: %+v", attempt, ev)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for {
		ev, err := c.Next(ctx)
		if err != nil {
			break // nothing more: good
		}
		if ev.Type == "message" {
			t.Fatalf("delivered past max_deliver: %+v", ev)
		}
	}
	js, _ := jetstream.New(g.Conn)
	st, err := js.Stream(context.Background(), bus.PushDurable.Stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(context.Background(), bus.PushDurable.Subject("jobs", "dlq", "shop", "workers", ""))
	if err != nil {
		t.Fatalf("no dead letter: %v", err)
	}
	if string(m.Data) != "poison" || m.Header.Get("Jetway-Dead-Deliveries") != "2" || m.Header.Get("Jetway-Dead-Seq") == "" {
		t.Fatalf("dead letter: %q %v", m.Data, m.Header)
	}
	if st := g.Push.Stats(); st.DeadLetters != 1 {
		t.Errorf("stats: %+v", st)
	}
	// A subscriber of the topic never sees a dead letter.
	p, err := pushclient.Pull(context.Background(), pushclient.Options{Edge: g.URL, Topic: "jobs", Header: http.Header{"X-Api-Key": {shop}}, From: "0"}, 0, 0)
	if err != nil || len(p.Messages) != 1 || p.Messages[0].Data != "poison" {
		t.Fatalf("the topic's messages: %+v %v", p, err)
	}
}

// A nacked message comes again at once; a member that leaves gives back
// what it held, to another member, without waiting for the ack wait.
func TestGroupNackAndLeave(t *testing.T) {
	g, pub, shop := startGroups(t, "1h", 5)
	a := member(t, jetwaytest.ServeTCP(t, g.Edge), "tcp", shop, 1)
	publishTo(t, g, pub, "jobs", "", "one")
	ev := next(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Nack(ctx, ev.Receipt, 0); err != nil {
		t.Fatal(err)
	}
	if ev2 := next(t, a); ev2.Data != "one" || ev2.Attempt != 2 {
		t.Fatalf("after the nack: %+v", ev2)
	}
	b := member(t, g.URL, "ws", shop, 1)
	a.Close() // holding "one", unacked
	if ev3 := next(t, b); ev3.Data != "one" || ev3.Attempt != 3 {
		t.Fatalf("given back: %+v", ev3)
	}
}

// A group is pulled over HTTP too: the messages come with receipts, are
// acked and nacked over HTTP on any edge, and a nacked one comes again.
func TestGroupPull(t *testing.T) {
	g, pub, shop := startGroups(t, "1h", 5)
	edge2, _, _ := g.AddEdge(t, edgeOptions())
	o := pushclient.Options{Edge: g.URL, Topic: "jobs", Header: http.Header{"X-Api-Key": {shop}}, Group: "workers"}
	ctx := context.Background()
	// Made by the first pull (nothing yet): messages come after it.
	if p, err := pushclient.Pull(ctx, o, 0, 0); err != nil || len(p.Messages) != 0 {
		t.Fatalf("empty: %+v %v", p, err)
	}
	for i := range 3 {
		publishTo(t, g, pub, "jobs", "", fmt.Sprint("job", i))
	}
	// The group's consumer counts what was stored a moment after the
	// publishes were answered: a pull answers what it has then.
	var got []pushclient.PulledMessage
	for deadline := time.Now().Add(5 * time.Second); len(got) < 2 && time.Now().Before(deadline); {
		p, err := pushclient.Pull(ctx, o, 2-len(got), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Messages...)
	}
	if len(got) != 2 || got[0].Data != "job0" || got[1].Data != "job1" || got[0].Receipt == "" {
		t.Fatalf("pull: %+v", got)
	}
	o2 := o
	o2.Edge = edge2
	if err := pushclient.AckGroup(ctx, o2, []string{got[0].Receipt}, []string{got[1].Receipt}, 0); err != nil {
		t.Fatal(err)
	}
	// The server takes a nack in its own time: pull until both come.
	seen := map[string]uint64{}
	for deadline := time.Now().Add(5 * time.Second); len(seen) < 2 && time.Now().Before(deadline); {
		p, err := pushclient.Pull(ctx, o, 0, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range p.Messages {
			if _, dup := seen[m.Data]; dup {
				t.Fatalf("%s twice", m.Data)
			}
			seen[m.Data] = m.Attempt
		}
	}
	if len(seen) != 2 || seen["job1"] != 2 || seen["job2"] != 1 {
		t.Fatalf("after ack and nack: %v", seen)
	}
	// A long poll: answered when the next comes.
	go func() {
		time.Sleep(300 * time.Millisecond)
		publishTo(t, g, pub, "jobs", "", "late")
	}()
	if p, err := pushclient.Pull(ctx, o, 0, 10*time.Second); err != nil || len(p.Messages) != 1 || p.Messages[0].Data != "late" {
		t.Fatalf("long poll: %+v %v", p, err)
	}
}

// Groups are the topic's, over a transport that acks; receipts are the
// group's own.
func TestGroupRefusals(t *testing.T) {
	g, pub, shop := startGroups(t, "1h", 5)
	other := g.PutKeyedApp("other")
	for _, c := range []struct{ name, path string }{
		{"unknown group", "/_jetway/ws/jobs?group=nope"},
		{"over sse", "/_jetway/sse/jobs?group=workers"},
		{"with after", "/_jetway/pull/jobs?group=workers&after=1"},
		{"with device", "/_jetway/pull/jobs?group=workers&device=d1"},
		{"bad name", "/_jetway/pull/jobs?group=a.b"},
		{"prefetch 0", "/_jetway/pull/jobs?group=workers&prefetch=0"},
		{"prefetch 101", "/_jetway/pull/jobs?group=workers&prefetch=101"},
		{"prefetch alone", "/_jetway/pull/jobs?prefetch=5"},
		{"a topic without groups", "/_jetway/pull/orders?group=workers"},
	} {
		if r := g.Do("GET", c.path, nil, "X-Api-Key", shop); r.Status != 400 || r.Code != "BAD_REQUEST" {
			t.Errorf("%s: %d %s", c.name, r.Status, r.Body)
		}
	}
	publishTo(t, g, pub, "jobs", "", "x")
	o := pushclient.Options{Edge: g.URL, Topic: "jobs", Header: http.Header{"X-Api-Key": {shop}}, Group: "workers"}
	ctx := context.Background()
	if _, err := pushclient.Pull(ctx, o, 0, 0); err != nil {
		t.Fatal(err)
	}
	publishTo(t, g, pub, "jobs", "", "y")
	p, err := pushclient.Pull(ctx, o, 0, 0)
	if err != nil || len(p.Messages) != 1 {
		t.Fatalf("%+v %v", p, err)
	}
	receipt := p.Messages[0].Receipt
	// Another app's group of the same name is another consumer: shop's
	// receipt is not other's to ack.
	oo := o
	oo.Header = http.Header{"X-Api-Key": {other}}
	for _, c := range []struct {
		name string
		o    pushclient.Options
		ack  []string
	}{
		{"another app's receipt", oo, []string{receipt}},
		{"not a receipt", o, []string{"x"}},
		{"a forged subject", o, []string{receipt + ".x"}},
		{"none", o, nil},
	} {
		var he *pushclient.HTTPError
		if err := pushclient.AckGroup(ctx, c.o, c.ack, nil, 0); !errors.As(err, &he) || he.Status != 400 {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if r := g.Do("POST", "/_jetway/ack/jobs?group=workers", strings.NewReader(`{"nack":["`+receipt+`"],"delay":"2h"}`), "X-Api-Key", shop); r.Status != 400 {
		t.Errorf("a delay past an hour: %d %s", r.Status, r.Body)
	}
	// Over a connection, a bad receipt closes it with 1008.
	c := member(t, g.URL, "ws", shop, 1)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.AckReceipt(cctx, "jetway_push.gffff.1.1.1.1.0"); err != nil {
		t.Fatal(err)
	}
	var ce *pushclient.CloseError
	for {
		_, err := c.Next(cctx)
		if err != nil {
			if !errors.As(err, &ce) || ce.Code != 1008 {
				t.Errorf("bad receipt: %v", err)
			}
			break
		}
	}
	// A topic entry: no groups on latest_only, an ack wait within bounds.
	for _, doc := range []string{
		`{"name":"v","mode":"latest_only","groups":{"names":["w"]}}`,
		`{"name":"v","groups":{"names":["w"],"ack_wait":"100ms"}}`,
		`{"name":"v","groups":{"names":["a.b"]}}`,
		`{"name":"v","groups":{"names":[]}}`,
	} {
		if _, err := g.Client.PutTopic(ctx, []byte(doc)); err == nil {
			t.Errorf("stored %s", doc)
		}
	}
}

// A group's consumer deleted under it (an operator's nats consumer rm)
// ends its members, and is made again by the next: nobody keeps
// following a consumer that is gone.
func TestGroupConsumerDeletedIsMadeAgain(t *testing.T) {
	g, pub, shop := startGroups(t, "1h", 5)
	c := member(t, g.URL, "ws", shop, 1)
	js, _ := jetstream.New(g.Conn)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if err := js.DeleteConsumer(ctx, bus.PushDurable.Stream, push.GroupConsumer("jobs", "shop", "workers")); err != nil {
		t.Fatal(err)
	}
	for { // the member connected then is ended
		ev, err := c.Next(ctx)
		if err != nil {
			break
		}
		if ev.Type == "message" {
			t.Fatalf("%+v", ev)
		}
	}
	for {
		c, err := pushclient.Dial(ctx, pushclient.Options{Edge: g.URL, Topic: "jobs", Transport: "ws", Header: http.Header{"X-Api-Key": {shop}}, Group: "workers"})
		if err != nil {
			t.Fatal(err)
		}
		publishTo(t, g, pub, "jobs", "", "again")
		got := make(chan string, 1)
		go func() {
			for {
				ev, err := c.Next(ctx)
				if err != nil {
					close(got)
					return
				}
				if ev.Type == "message" {
					got <- ev.Data
					return
				}
			}
		}()
		select {
		case d, ok := <-got:
			c.Close()
			if ok && d == "again" {
				return
			}
		case <-time.After(3 * time.Second):
			c.Close()
		}
		if ctx.Err() != nil {
			t.Fatal("no member got a message after the consumer was deleted")
		}
	}
}
