package push_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/push"
	"github.com/jetway-gw/jetway/push/pushclient"
	"github.com/jetway-gw/jetway/registry"
)

// pullUntil pulls (after the stored ack) until the first message is
// want, failing after 5s: a connection's ack is stored within 100ms.
func pullUntil(t *testing.T, o pushclient.Options, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := pushclient.Pull(context.Background(), o, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Messages) == 1 && p.Messages[0].Data == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pull after the ack: %+v, want %q first", p, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A client that acks over its connection — any transport — and comes
// back with after=ack, to another edge, goes on after its ack; one that
// never acked gets everything the stream keeps.
func TestAckResumesOnAnyEdge(t *testing.T) {
	for _, transport := range []string{"sse", "ws", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			g, pub, shop := start(t)
			edge2, _, e2 := g.AddEdge(t, edgeOptions())
			conn1, conn2 := g.URL, edge2
			if transport == "tcp" {
				conn1, conn2 = jetwaytest.ServeTCP(t, g.Edge), jetwaytest.ServeTCP(t, e2)
			}
			one := publish(t, g, pub, "", "one")
			publish(t, g, pub, "", "two")
			o := pushclient.Options{Edge: conn1, Topic: "orders", Transport: transport, Header: http.Header{"X-Api-Key": {shop}}, Device: "d1", After: "ack"}
			c, err := pushclient.Dial(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"one", "two"} { // never acked: all of it
				if ev := next(t, c); ev.Data != want {
					t.Fatalf("%+v, want %q", ev, want)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := c.Ack(ctx, one); err != nil {
				t.Fatal(err)
			}
			pullUntil(t, pushclient.Options{Edge: edge2, Topic: "orders", Header: o.Header, Device: "d1"}, "two")
			c.Close()
			o.Edge = conn2
			c, err = pushclient.Dial(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if ev := next(t, c); ev.Data != "two" {
				t.Fatalf("after the ack: %+v", ev)
			}
			three := publish(t, g, pub, "", "three")
			if ev := next(t, c); ev.Data != "three" {
				t.Fatalf("live after the ack: %+v", ev)
			}
			// Acked over HTTP: the next connection starts after it.
			acked, err := pushclient.Ack(ctx, pushclient.Options{Edge: g.URL, Topic: "orders", Header: o.Header, Device: "d1"}, three)
			if err != nil || acked != three {
				t.Fatalf("ack %s: %s %v", three, acked, err)
			}
			c.Close()
			c, err = pushclient.Dial(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			four := publish(t, g, pub, "", "four")
			if ev := next(t, c); ev.Cursor != four {
				t.Fatalf("after the HTTP ack: %+v, want %s", ev, four)
			}
		})
	}
}

// An ack only moves forward, and is kept per subscriber: a device's, a
// token user's and the app's are apart.
func TestAckOnlyMovesForwardPerSubscriber(t *testing.T) {
	g, pub, shop := start(t)
	one := publish(t, g, pub, "", "one")
	two := publish(t, g, pub, "", "two")
	ctx := context.Background()
	d1 := pushclient.Options{Edge: g.URL, Topic: "orders", Header: http.Header{"X-Api-Key": {shop}}, Device: "d1"}
	if acked, err := pushclient.Ack(ctx, d1, two); err != nil || acked != two {
		t.Fatalf("%s %v", acked, err)
	}
	if acked, err := pushclient.Ack(ctx, d1, one); err != nil || acked != two {
		t.Fatalf("an earlier ack took the device back: %s %v", acked, err)
	}
	app := d1
	app.Device = ""
	if acked, err := pushclient.Ack(ctx, app, one); err != nil || acked != one {
		t.Fatalf("the app's ack: %s %v", acked, err)
	}
	for _, c := range []struct {
		o    pushclient.Options
		want int
	}{{d1, 0}, {app, 1}, {pushclient.Options{Edge: g.URL, Topic: "orders", Header: d1.Header, Device: "d2"}, 2}} {
		p, err := pushclient.Pull(ctx, c.o, 0, 0)
		if err != nil || len(p.Messages) != c.want {
			t.Errorf("device %q: %+v %v, want %d messages", c.o.Device, p, err, c.want)
		}
	}
	// A token's user (of the same app) has her own.
	token, _ := shopIssuer(t, g)
	alice := pushclient.Options{Edge: g.URL, Topic: "orders", Header: http.Header{"Authorization": {"Bearer " + token("alice", time.Now().Add(time.Hour))}}}
	if p, err := pushclient.Pull(ctx, alice, 0, 0); err != nil || len(p.Messages) != 2 {
		t.Errorf("alice, never acked: %+v %v", p, err)
	}
	if acked, err := pushclient.Ack(ctx, alice, two); err != nil || acked != two {
		t.Fatalf("alice: %s %v", acked, err)
	}
	if p, err := pushclient.Pull(ctx, alice, 0, 0); err != nil || len(p.Messages) != 0 {
		t.Errorf("alice after her ack: %+v %v", p, err)
	}
}

// A bad ack is refused with its reason: over HTTP with 400, over a
// connection by closing it (1008; 1007 for a frame that is not JSON).
func TestBadAcks(t *testing.T) {
	g, pub, shop := start(t)
	c1 := publish(t, g, pub, "", "one")
	epoch, _, _ := strings.Cut(c1, ":")
	for _, c := range []struct{ name, body string }{
		{"no cursor", `{}`},
		{"not a cursor", `{"cursor":"x"}`},
		{"unknown field", `{"cursor":"` + c1 + `","all":true}`},
		{"not JSON", `one`},
		{"from the future", `{"cursor":"` + epoch + `:999"}`},
		{"another epoch", `{"cursor":"1:1"}`},
		{"too large", `{"cursor":"` + strings.Repeat("1", 200<<10) + `"}`},
	} {
		r := g.Do("POST", "/_jetway/ack/orders", strings.NewReader(c.body), "X-Api-Key", shop)
		want := 400
		if c.name == "too large" {
			want = 413
		}
		if r.Status != want {
			t.Errorf("%s: %d %s", c.name, r.Status, r.Body)
		}
	}
	if r := g.Do("POST", "/_jetway/ack/orders", strings.NewReader(`{"cursor":"`+c1+`"}`)); r.Status != 401 {
		t.Errorf("no credentials: %d %s", r.Status, r.Body)
	}
	if r := g.Do("GET", "/_jetway/ack/orders", nil, "X-Api-Key", shop); r.Status != 405 {
		t.Errorf("GET: %d %s", r.Status, r.Body)
	}
	tcp := jetwaytest.ServeTCP(t, g.Edge)
	for _, c := range []struct{ name, transport, cursor string }{
		{"past what was sent", "ws", epoch + ":999"},
		{"another epoch", "ws", "1:1"},
		{"past what was sent", "tcp", epoch + ":999"},
		{"bad cursor", "tcp", "a:b"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		edgeURL := g.URL
		if c.transport == "tcp" {
			edgeURL = tcp
		}
		conn, err := pushclient.Dial(ctx, pushclient.Options{Edge: edgeURL, Topic: "orders", Transport: c.transport, Header: http.Header{"X-Api-Key": {shop}}})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := conn.Next(ctx); err != nil || ev.Type != "ready" {
			t.Fatalf("%+v %v", ev, err)
		}
		if err := conn.Ack(ctx, c.cursor); err != nil {
			t.Fatal(err)
		}
		_, err = conn.Next(ctx)
		var ce *pushclient.CloseError
		if !errors.As(err, &ce) || ce.Code != 1008 || !strings.Contains(ce.Reason, "ack") {
			t.Errorf("%s %s: %v, want close 1008", c.transport, c.name, err)
		}
		conn.Close()
	}
	// A WebSocket frame that is not a JSON object: 1007.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(g.URL, "http")+"/_jetway/ws/orders", &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {shop}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageText, []byte("ack")); err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, _, err = ws.Read(ctx)
	}
	if st := websocket.CloseStatus(err); st != websocket.StatusInvalidFramePayloadData {
		t.Errorf("not JSON: %v", err)
	}
}

// A pull answers with the messages after its cursor (the ack by
// default), at most max, at once or when the first comes within its
// wait; its cursor goes on past messages for others.
func TestPull(t *testing.T) {
	g, pub, shop := start(t)
	ctx := context.Background()
	o := pushclient.Options{Edge: g.URL, Topic: "orders", Header: http.Header{"X-Api-Key": {shop}}, Device: "d1"}
	publish(t, g, pub, "", "one")
	publish(t, g, pub, "?to=device&app=shop&device=d2", "for d2")
	two := publish(t, g, pub, "", "two")
	three := publish(t, g, pub, "?to=device&app=shop&device=d1", "three")
	last := publish(t, g, pub, "?to=device&app=shop&device=d2", "for d2 again")
	p, err := pushclient.Pull(ctx, o, 2, 0)
	if err != nil || len(p.Messages) != 2 || p.Messages[0].Data != "one" || p.Messages[1].Data != "two" || p.Cursor != two {
		t.Fatalf("first pull: %+v %v", p, err)
	}
	o.After = p.Cursor
	if p, err = pushclient.Pull(ctx, o, 0, 0); err != nil || len(p.Messages) != 1 || p.Messages[0].Cursor != three || p.Cursor != last {
		t.Fatalf("second pull: %+v %v (want %s, then cursor %s)", p, err, three, last)
	}
	o.After = p.Cursor
	if p, err = pushclient.Pull(ctx, o, 0, 0); err != nil || len(p.Messages) != 0 || p.Cursor != last {
		t.Fatalf("nothing new: %+v %v", p, err)
	}
	// A long poll: answered when the message comes.
	go func() {
		time.Sleep(300 * time.Millisecond)
		publish(t, g, pub, "", "four")
	}()
	if p, err = pushclient.Pull(ctx, o, 0, 10*time.Second); err != nil || len(p.Messages) != 1 || p.Messages[0].Data != "four" {
		t.Fatalf("long poll: %+v %v", p, err)
	}
	// By default after the ack: none yet, so everything; then after it.
	o.After = ""
	if p, err = pushclient.Pull(ctx, o, 0, 0); err != nil || len(p.Messages) != 4 {
		t.Fatalf("never acked: %+v %v", p, err)
	}
	if _, err := pushclient.Ack(ctx, o, three); err != nil {
		t.Fatal(err)
	}
	if p, err = pushclient.Pull(ctx, o, 0, 0); err != nil || len(p.Messages) != 1 || p.Messages[0].Data != "four" {
		t.Fatalf("after the ack: %+v %v", p, err)
	}
	// A cursor of another epoch: a gap, and what the stream keeps.
	o.After = "1:3"
	if p, err = pushclient.Pull(ctx, o, 0, 0); err != nil || len(p.Gaps) != 1 || p.Gaps[0].Reason != "epoch" || len(p.Messages) != 4 {
		t.Fatalf("another epoch: %+v %v", p, err)
	}
	for _, q := range []string{"max=0", "max=1001", "max=x", "wait=61s", "wait=-1s", "wait=soon", "after=1&from=1"} {
		if r := g.Do("GET", "/_jetway/pull/orders?"+q, nil, "X-Api-Key", shop); r.Status != 400 || r.Code != "BAD_REQUEST" {
			t.Errorf("%s: %d %s", q, r.Status, r.Body)
		}
	}
	if r := g.Do("GET", "/_jetway/pull/orders", nil); r.Status != 401 {
		t.Errorf("no credentials: %d %s", r.Status, r.Body)
	}
}

// A pull waiting when its app is disabled is answered 403 with why.
func TestPullEndsWhenRevoked(t *testing.T) {
	g, _, shop := start(t)
	done := make(chan error, 1)
	go func() {
		_, err := pushclient.Pull(context.Background(), pushclient.Options{Edge: g.URL, Topic: "orders", Header: http.Header{"X-Api-Key": {shop}}}, 0, 30*time.Second)
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for g.Push.Stats().Connections == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	off := *g.EdgeWatcher.Current().Apps["shop"]
	off.Status = registry.AppDisabled
	g.PutApps(&off)
	select {
	case err := <-done:
		var he *pushclient.HTTPError
		if !errors.As(err, &he) || he.Status != 403 || !strings.Contains(he.Message, "disabled") {
			t.Fatalf("%v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pull of a disabled app went on waiting")
	}
}

// Behind the edge's framing guard (as jetway serve and edge listen), a
// WebSocket's frames from the client pass as they come: its pongs keep
// the connection, its acks are stored. The guard once held them as an
// unfinished header block, and pings timed out.
func TestWebSocketFramesPassTheFramingGuard(t *testing.T) {
	g := jetwaytest.StartWith(t, jetwaytest.Options{Push: push.Options{Ping: 200 * time.Millisecond, WriteTimeout: 500 * time.Millisecond}})
	g.PutTopic(topic)
	pub, shop := g.PutKeyedApp("pub"), g.PutKeyedApp("shop")
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: g.Edge, ConnContext: edge.ConnContext, DisableGeneralOptionsHandler: true}
	go func() { _ = srv.Serve(edge.GuardFraming(inner, 0)) }()
	t.Cleanup(func() { _ = srv.Close() })
	guarded := "http://" + inner.Addr().String()
	one := publish(t, g, pub, "", "one")
	o := pushclient.Options{Edge: guarded, Topic: "orders", Transport: "ws", Header: http.Header{"X-Api-Key": {shop}}, Device: "d1", From: "0"}
	c, err := pushclient.Dial(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ev := next(t, c); ev.Cursor != one {
		t.Fatalf("%+v", ev)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ack(ctx, one); err != nil {
		t.Fatal(err)
	}
	two := publish(t, g, pub, "", "two")
	pullUntil(t, pushclient.Options{Edge: g.URL, Topic: "orders", Header: o.Header, Device: "d1"}, "two")
	// Read on (a WebSocket answers pings while it reads): several pings
	// go by, each answered, and the connection stays and delivers.
	events := make(chan pushclient.Event, 16)
	go func() {
		for {
			ev, err := c.Next(context.Background())
			if err != nil {
				close(events)
				return
			}
			events <- ev
		}
	}()
	if ev := <-events; ev.Cursor != two {
		t.Fatalf("%+v", ev)
	}
	time.Sleep(1500 * time.Millisecond)
	three := publish(t, g, pub, "", "three")
	if ev, ok := <-events; !ok || ev.Cursor != three {
		t.Fatalf("after the pings: %+v (open %v)", ev, ok)
	}
}
