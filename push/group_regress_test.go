package push_test

// Review of the push groups (03cf02d, d37d410): failing tests for the
// problems found. Run one with
//   go test ./push/ -run TestReviewGroup<Name> -count=1 -p 1 -v

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

func deadLetters(t *testing.T, g *jetwaytest.Gateway) (n uint64) {
	t.Helper()
	js, _ := jetstream.New(g.Conn)
	st, err := js.Stream(context.Background(), bus.PushDurable.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(bus.PushDurable.Subject("jobs", "dlq", "shop", "workers", "")))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// A group pull whose answer is full by bytes (256 KiB) nacks the rest of
// what it fetched: each such nack is a delivery, so messages that no
// client ever received become dead letters after max_deliver pulls.
func TestGroupRegressPullFullNacksMakeDeadLetters(t *testing.T) {
	g, pub, shop := startGroups(t, "1h", 2)
	o := pushclient.Options{Edge: g.URL, Topic: "jobs", Header: http.Header{"X-Api-Key": {shop}}, Group: "workers"}
	ctx := context.Background()
	if _, err := pushclient.Pull(ctx, o, 0, 0); err != nil { // makes the consumer
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 100<<10)
	const n = 10
	for i := range n {
		publishTo(t, g, pub, "jobs", "", fmt.Sprintf("%d %s", i, pad))
	}
	got := map[string]bool{}
	for range 2 * n {
		if len(got) == n {
			break
		}
		p, err := pushclient.Pull(ctx, o, n, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Messages) == 0 {
			break
		}
		var receipts []string
		for _, m := range p.Messages {
			got[strings.Fields(m.Data)[0]] = true
			receipts = append(receipts, m.Receipt)
		}
		if err := pushclient.AckGroup(ctx, o, receipts, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != n {
		t.Errorf("delivered %d of %d messages (each acked at once); dead letters: %d, never delivered to any client", len(got), n, deadLetters(t, g))
	}
}

// pushclient.Subscription drops a group's redelivery (same sequence as
// one it returned): the message is never returned to the application, so
// never acked, and ends as a dead letter.
func TestGroupRegressSubscriptionDropsRedelivery(t *testing.T) {
	g, pub, shop := startGroups(t, "1s", 5)
	sub := pushclient.Subscribe(pushclient.Options{Edge: g.URL, Topic: "jobs", Transport: "ws", Header: http.Header{"X-Api-Key": {shop}}, Group: "workers", Prefetch: 1})
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	for { // connected: the consumer is made
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == "ready" {
			break
		}
	}
	publishTo(t, g, pub, "jobs", "", "job")
	var attempts []uint64
	for len(attempts) < 2 {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after deliveries %v (not acked, ack_wait 1s): %v", attempts, err)
		}
		if ev.Type == "message" {
			attempts = append(attempts, ev.Attempt)
		}
	}
}

// prefetch=P should mean the member takes P messages at a time; but the
// consumer iterator asks the server for more ahead of the credits (a new
// pull once half its batch is used), so a member holding P unacked
// messages sits on the next ones too, while another member of the group
// idles until ack_wait (here 1h).
func TestGroupRegressPrefetchHoardsFromOtherMembers(t *testing.T) {
	g, pub, shop := startGroups(t, "1h", 5)
	a := member(t, g.URL, "ws", shop, 4)
	for i := range 4 {
		publishTo(t, g, pub, "jobs", "", fmt.Sprint("a", i))
	}
	for range 4 {
		next(t, a) // held, unacked: a has no credit left
	}
	b := member(t, g.URL, "ws", shop, 4)
	time.Sleep(200 * time.Millisecond)
	publishTo(t, g, pub, "jobs", "", "for b")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		ev, err := b.Next(ctx)
		if err != nil {
			t.Fatalf("b (idle) never got \"for b\" while a holds its prefetch of 4: %v", err)
		}
		if ev.Type == "message" {
			if ev.Data != "for b" {
				t.Fatalf("%+v", ev)
			}
			return
		}
	}
}

// A group pull waiting is not ended by the edge shutting down (nor by a
// revocation or its token expiring: groupPull never reads the kick):
// Close waits for the pull's whole wait.
func TestGroupRegressPullIgnoresShutdown(t *testing.T) {
	g, _, shop := startGroups(t, "1h", 5)
	o := pushclient.Options{Edge: g.URL, Topic: "jobs", Header: http.Header{"X-Api-Key": {shop}}, Group: "workers"}
	done := make(chan error, 1)
	go func() {
		_, err := pushclient.Pull(context.Background(), o, 0, 20*time.Second)
		done <- err
	}()
	natstestCheck(t, 5*time.Second, func() error {
		if g.Push.Stats().Connections == 0 {
			return errors.New("no pull yet")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := g.Push.Close(ctx); err != nil {
		t.Errorf("Close with a group pull waiting: %v after %v", err, time.Since(t0))
	}
	select {
	case err := <-done:
		var he *pushclient.HTTPError
		if !errors.As(err, &he) || he.Status != 503 {
			t.Errorf("the group pull at shutdown: %v, want 503", err)
		}
	case <-time.After(2 * time.Second):
		t.Error("the group pull went on waiting after Close")
	}
}

// A group pull waiting when its app is disabled is answered with the
// messages that come meanwhile, not 403.
func TestGroupRegressPullIgnoresRevocation(t *testing.T) {
	g, pub, shop := startGroups(t, "1h", 5)
	o := pushclient.Options{Edge: g.URL, Topic: "jobs", Header: http.Header{"X-Api-Key": {shop}}, Group: "workers"}
	if _, err := pushclient.Pull(context.Background(), o, 0, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		p, err := pushclient.Pull(context.Background(), o, 0, 20*time.Second)
		if err == nil {
			err = fmt.Errorf("answered %d messages", len(p.Messages))
		}
		done <- err
	}()
	natstestCheck(t, 5*time.Second, func() error {
		if g.Push.Stats().Connections == 0 {
			return errors.New("no pull yet")
		}
		return nil
	})
	off := *g.EdgeWatcher.Current().Apps["shop"]
	off.Status = "disabled"
	g.PutApps(&off)
	time.Sleep(500 * time.Millisecond)
	publishTo(t, g, pub, "jobs", "", "for a disabled app")
	select {
	case err := <-done:
		var he *pushclient.HTTPError
		if !errors.As(err, &he) || he.Status != 403 {
			t.Fatalf("group pull of an app disabled while it waits: %v, want 403", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the group pull of a disabled app went on waiting")
	}
}

// A group pull whose client leaves while it waits still takes the next
// message (its Fetch outlives the request), answers nobody, and neither
// nacks it: the message is held until ack_wait (1h here), while another
// member asks in vain.
func TestGroupRegressPullClientGoneHoldsMessage(t *testing.T) {
	g, pub, shop := startGroups(t, "1h", 5)
	o := pushclient.Options{Edge: g.URL, Topic: "jobs", Header: http.Header{"X-Api-Key": {shop}}, Group: "workers"}
	if _, err := pushclient.Pull(context.Background(), o, 0, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, _ = pushclient.Pull(ctx, o, 0, 20*time.Second) // gives up after 300ms
	cancel()
	time.Sleep(200 * time.Millisecond)
	publishTo(t, g, pub, "jobs", "", "job")
	time.Sleep(6 * time.Second) // past the gone pull's 5s fetch
	p, err := pushclient.Pull(context.Background(), o, 0, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Messages) != 1 {
		t.Fatalf("another pull got %d messages: the one published after the first pull's client left is held by nobody until ack_wait", len(p.Messages))
	}
}

// A member that leaves nacks what its iterator took ahead of its client
// (see the test above), and that counts as a delivery: with max_deliver
// 2, messages sent to a client once (or never) become dead letters after
// a few members, each holding its prefetch of 4, came and went.
func TestGroupRegressLeavingMemberBurnsDeliveries(t *testing.T) {
	g, pub, shop := startGroups(t, "1h", 2)
	sent := map[string]int{} // data → times a client was sent it
	for i := range 4 {
		c := member(t, g.URL, "ws", shop, 4)
		if i == 0 {
			for j := range 4 {
				publishTo(t, g, pub, "jobs", "", fmt.Sprint("a", j))
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		for n := 0; n < 4; {
			ev, err := c.Next(ctx)
			if err != nil {
				break
			}
			if ev.Type == "message" {
				sent[ev.Data]++
				n++
			}
		}
		cancel()
		if i == 0 {
			publishTo(t, g, pub, "jobs", "", "x")
		}
		time.Sleep(300 * time.Millisecond)
		_ = c.Close()
		time.Sleep(300 * time.Millisecond)
	}
	js, _ := jetstream.New(g.Conn)
	cons, err := js.OrderedConsumer(context.Background(), bus.PushDurable.Stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.PushDurable.Subject("jobs", "dlq", "shop", "workers", "")}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cons.FetchNoWait(100)
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		d := string(m.Data())
		if sent[d] < 2 {
			t.Errorf("%q is a dead letter (Jetway-Dead-Deliveries %s) though clients were sent it %d times (max_deliver 2)", d, m.Headers().Get("Jetway-Dead-Deliveries"), sent[d])
		}
	}
	_ = push.DefaultPrefetch
}

// A group is the app's back end's queue, but an end user's token (the
// app's issuer, a user's sub) joins it too: a browser user can take the
// back end's messages and ack them away (and ack any receipt over HTTP).
func TestGroupRegressTokenUserJoinsBackEndQueue(t *testing.T) {
	g, pub, _ := start(t)
	token, _ := shopIssuer(t, g)
	g.PutTopic(`{"name":"jobs","publish":["pub"],"subscribe":["*"],"auth":{"methods":["key","jwt"]},"groups":{"names":["workers"]}}`)
	tok := token("alice", time.Now().Add(time.Hour))
	r := g.Do("GET", "/_jetway/pull/jobs?group=workers", nil, "Authorization", "Bearer "+tok)
	if r.Status == 200 {
		publishTo(t, g, pub, "jobs", "", "back-end job")
		r = g.Do("GET", "/_jetway/pull/jobs?group=workers", nil, "Authorization", "Bearer "+tok)
		t.Fatalf("an end user's token consumes the app's group: %d %s", r.Status, r.Body)
	}
}

// A connection member whose messages are acked over HTTP (as docs say a
// receipt can be, "on any edge", and as pushclient.Subscription does
// between connections) keeps its credit spent until ack_wait: it stalls.
func TestGroupRegressHTTPAckOfConnectionMessageStalls(t *testing.T) {
	g, pub, shop := startGroups(t, "1h", 5)
	c := member(t, g.URL, "ws", shop, 1)
	publishTo(t, g, pub, "jobs", "", "one")
	ev := next(t, c)
	o := pushclient.Options{Edge: g.URL, Topic: "jobs", Header: http.Header{"X-Api-Key": {shop}}, Group: "workers"}
	if err := pushclient.AckGroup(context.Background(), o, []string{ev.Receipt}, nil, 0); err != nil {
		t.Fatal(err)
	}
	publishTo(t, g, pub, "jobs", "", "two")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	for {
		ev, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("\"one\" acked over HTTP; the member (prefetch 1) never got \"two\": %v", err)
		}
		if ev.Type == "message" {
			return
		}
	}
}
