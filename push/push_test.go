package push_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// topic is the topic of these tests: "pub" publishes, every app
// subscribes.
const topic = `{"name":"orders","publish":["pub"],"subscribe":["*"],"origins":["https://shop.example"]}`

// publish posts one message over the edge and returns its cursor.
func publish(t *testing.T, g *jetwaytest.Gateway, key, query, data string, hdr ...string) string {
	t.Helper()
	r := g.Do("POST", "/_jetway/publish/orders"+query, strings.NewReader(data), append([]string{"X-Api-Key", key}, hdr...)...)
	if r.Status != 200 {
		t.Fatalf("publish %s: %d %s", data, r.Status, r.Body)
	}
	var p struct {
		Seq       uint64
		Cursor    string
		Duplicate bool
	}
	if err := json.Unmarshal([]byte(r.Body), &p); err != nil || p.Seq == 0 || !strings.HasSuffix(p.Cursor, fmt.Sprintf(":%d", p.Seq)) {
		t.Fatalf("publish answer %s (%v)", r.Body, err)
	}
	return p.Cursor
}

// next reads events until a message or gap, failing after 5s.
func next(t *testing.T, c interface {
	Next(context.Context) (pushclient.Event, error)
}) pushclient.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		ev, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		if ev.Type == "message" || ev.Type == "gap" {
			return ev
		}
	}
}

func start(t *testing.T) (g *jetwaytest.Gateway, pub, shop string) {
	g = jetwaytest.Start(t)
	g.PutTopic(topic)
	return g, g.PutKeyedApp("pub"), g.PutKeyedApp("shop")
}

// A client that comes back — over either transport, to either edge —
// gets everything after its cursor, in order, then live messages; the
// messages addressed to another app or device never reach it.
func TestResumeAcrossTransportsAndEdges(t *testing.T) {
	for _, transport := range []string{"sse", "ws", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			g, pub, shop := start(t)
			edge1 := g.URL
			edge2, _, e2 := g.AddEdge(t, edgeOptions())
			if transport == "tcp" {
				edge1, edge2 = jetwaytest.ServeTCP(t, g.Edge), jetwaytest.ServeTCP(t, e2)
			}
			first := publish(t, g, pub, "", "one")
			o := pushclient.Options{Edge: edge1, Topic: "orders", Transport: transport, Header: http.Header{"X-Api-Key": {shop}}, Device: "d1", From: first}
			c, err := pushclient.Dial(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if ev := next(t, c); ev.Data != "one" || ev.Cursor != first {
				t.Fatalf("first: %+v", ev)
			}
			publish(t, g, pub, "?to=app&app=other", "not for shop")
			publish(t, g, pub, "?to=device&app=shop&device=d2", "not for d1")
			two := publish(t, g, pub, "?to=device&app=shop&device=d1", "two")
			if ev := next(t, c); ev.Data != "two" || ev.Cursor != two {
				t.Fatalf("live: %+v", ev)
			}
			c.Close()
			publish(t, g, pub, "?to=app&app=shop", "three\nlines\r\nhere")
			publish(t, g, pub, "", "four")
			// Back, on the other edge, after the last cursor it has.
			o.Edge, o.From, o.After = edge2, "", two
			c, err = pushclient.Dial(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			three := "three\nlines\r\nhere" // WebSocket and TCP keep the bytes
			if transport == "sse" {
				three = "three\nlines\nhere" // SSE ends each data line with LF
			}
			for _, want := range []string{three, "four"} {
				if ev := next(t, c); ev.Data != want {
					t.Fatalf("resumed: %+v, want %q", ev, want)
				}
			}
			five := publish(t, g, pub, "", "five")
			if ev := next(t, c); ev.Data != "five" || ev.Cursor != five {
				t.Fatalf("live after resume: %+v", ev)
			}
		})
	}
}

func edgeOptions() edge.Options { return edge.Options{} }

// Every refusal comes before any stream starts, with its code.
func TestRefusals(t *testing.T) {
	g, pub, shop := start(t)
	for _, c := range []struct {
		name, method, path string
		hdr                []string
		status             int
		code               string
	}{
		{"no credentials", "GET", "/_jetway/sse/orders", nil, 401, "UNAUTHENTICATED"},
		{"bad key", "GET", "/_jetway/sse/orders", []string{"X-Api-Key", "jw_nope"}, 401, "UNAUTHENTICATED"},
		{"foreign origin", "GET", "/_jetway/sse/orders", []string{"X-Api-Key", shop, "Origin", "https://evil.example"}, 403, "FORBIDDEN"},
		{"null origin", "GET", "/_jetway/ws/orders", []string{"X-Api-Key", shop, "Origin", "null"}, 403, "FORBIDDEN"},
		{"not a publisher", "POST", "/_jetway/publish/orders", []string{"X-Api-Key", shop}, 403, "FORBIDDEN"},
		{"unknown topic", "GET", "/_jetway/sse/nope", []string{"X-Api-Key", shop}, 404, "TOPIC_NOT_FOUND"},
		{"wildcard topic", "GET", "/_jetway/sse/orders.*", []string{"X-Api-Key", shop}, 404, "TOPIC_NOT_FOUND"},
		{"nul in topic", "GET", "/_jetway/sse/or%00ders", []string{"X-Api-Key", shop}, 400, "BAD_REQUEST"},
		{"no such endpoint", "GET", "/_jetway/nothing/orders", []string{"X-Api-Key", shop}, 404, "ROUTE_NOT_FOUND"},
		{"wrong method", "GET", "/_jetway/publish/orders", []string{"X-Api-Key", pub}, 405, "METHOD_NOT_ALLOWED"},
		{"bad cursor", "GET", "/_jetway/sse/orders?after=x:1", []string{"X-Api-Key", shop}, 400, "BAD_REQUEST"},
		{"both cursors", "GET", "/_jetway/sse/orders?after=1&from=1", []string{"X-Api-Key", shop}, 400, "BAD_REQUEST"},
		{"bad device", "GET", "/_jetway/sse/orders?device=a.b", []string{"X-Api-Key", shop}, 400, "BAD_REQUEST"},
		{"bad address", "POST", "/_jetway/publish/orders?to=user", []string{"X-Api-Key", pub}, 400, "BAD_REQUEST"},
	} {
		r := g.Do(c.method, c.path, nil, c.hdr...)
		if r.Status != c.status || r.Code != c.code {
			t.Errorf("%s: %d %s", c.name, r.Status, r.Body)
		}
	}
	big := strings.Repeat("x", registry.MaxPushMessage+1)
	if r := g.Do("POST", "/_jetway/publish/orders", strings.NewReader(big), "X-Api-Key", pub); r.Status != 413 || r.Code != "PAYLOAD_TOO_LARGE" {
		t.Errorf("too large: %d %s", r.Status, r.Body)
	}
	if r := g.Do("POST", "/_jetway/publish/orders", strings.NewReader("\xff\xfe"), "X-Api-Key", pub); r.Status != 400 {
		t.Errorf("not UTF-8: %d %s", r.Status, r.Body)
	}
	// A sandbox app is kept off a production topic.
	key, rec, err := registry.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	g.PutApps(&registry.App{ID: "tester", Status: registry.AppActive, Keys: []registry.AppKey{rec}, APIs: []string{"*"}, Sandbox: true})
	if r := g.Do("GET", "/_jetway/sse/orders", nil, "X-Api-Key", key); r.Status != 403 {
		t.Errorf("sandbox app on a production topic: %d %s", r.Status, r.Body)
	}
	// An API may not take a route under the reserved prefix.
	if _, err := g.Client.Put(context.Background(), []byte(`{"name":"x","pool":"p","route":{"path":"/_jetway/sse/orders"},"backend":{"type":"mock"}}`)); err == nil || !strings.Contains(err.Error(), "/_jetway/") {
		t.Errorf("route under /_jetway/: %v", err)
	}
}

// A cursor that cannot be honoured gets an explicit gap, then what there
// is: of another epoch (everything kept), from the future (live), older
// than the retention (what is left).
func TestGaps(t *testing.T) {
	g, pub, shop := start(t)
	one := publish(t, g, pub, "", "one")
	epoch, _, _ := strings.Cut(one, ":")
	dial := func(after string) *pushclient.Conn {
		c, err := pushclient.Dial(context.Background(), pushclient.Options{Edge: g.URL, Topic: "orders", Header: http.Header{"X-Api-Key": {shop}}, After: after})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c := dial("17:1")
	if ev := next(t, c); ev.Type != "gap" || ev.Gap.Reason != "epoch" || ev.Gap.Asked != "17:1" || ev.Gap.Resume != epoch+":0" {
		t.Fatalf("another epoch: %+v", ev)
	}
	if ev := next(t, c); ev.Data != "one" {
		t.Fatalf("after the epoch gap: %+v", ev)
	}
	c = dial(epoch + ":99")
	if ev := next(t, c); ev.Type != "gap" || ev.Gap.Reason != "future" || ev.Gap.Resume != one {
		t.Fatalf("the future: %+v", ev)
	}
	two := publish(t, g, pub, "", "two")
	if ev := next(t, c); ev.Cursor != two {
		t.Fatalf("live after the future gap: %+v", ev)
	}

	// A topic that keeps its messages one second.
	g.PutTopic(`{"name":"brief","publish":["pub"],"subscribe":["*"],"retention":{"max_age":"1s"}}`)
	r := g.Do("POST", "/_jetway/publish/brief", strings.NewReader("gone soon"), "X-Api-Key", pub)
	var p struct{ Cursor string }
	if err := json.Unmarshal([]byte(r.Body), &p); err != nil || r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	time.Sleep(2500 * time.Millisecond)
	g.Do("POST", "/_jetway/publish/brief", strings.NewReader("kept"), "X-Api-Key", pub)
	c, err := pushclient.Dial(context.Background(), pushclient.Options{Edge: g.URL, Topic: "brief", Header: http.Header{"X-Api-Key": {shop}}, After: p.Cursor})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ev := next(t, c); ev.Type != "gap" || ev.Gap.Reason != "expired" || ev.Gap.Asked != p.Cursor {
		t.Fatalf("expired: %+v", ev)
	}
	if ev := next(t, c); ev.Data != "kept" {
		t.Fatalf("after the expired gap: %+v", ev)
	}
}

// A client that reads slower than messages come loses none: it falls
// behind the edge's ring of live messages, and catches up from the stream.
func TestSlowClientLosesNothing(t *testing.T) {
	// A write timeout longer than the 300 publishes take on a loaded CI
	// machine under -race: this client is slow, not gone (a write
	// blocked past the timeout closes the connection, tested apart).
	g := jetwaytest.StartWith(t, jetwaytest.Options{Push: push.Options{RingLen: 2, WriteTimeout: 2 * time.Minute}})
	g.PutTopic(topic)
	pub, shop := g.PutKeyedApp("pub"), g.PutKeyedApp("shop")
	c, err := pushclient.Dial(context.Background(), pushclient.Options{Edge: g.URL, Topic: "orders", Transport: "ws", Header: http.Header{"X-Api-Key": {shop}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
		t.Fatalf("%+v %v", ev, err)
	}
	// 30 MB the client does not read: the socket's buffers fill, the
	// edge's write blocks, the ring of 2 is overwritten.
	const n = 300
	pad := strings.Repeat("x", 100<<10)
	for i := range n {
		publish(t, g, pub, "", fmt.Sprint(i, pad))
	}
	for i := range n {
		ev := next(t, c)
		if ev.Data != fmt.Sprint(i, pad) {
			t.Fatalf("message %d: %.40q", i, ev.Data)
		}
	}
	if st := g.Push.Stats(); st.CatchUps == 0 || st.Replayed == 0 || st.Delivered != n {
		t.Errorf("stats %+v: the client never caught up from the stream", st)
	}
}

// Disabling an app ends its connections on the edge as soon as the edge
// has the change; so does deleting the topic.
func TestRevocationEndsConnections(t *testing.T) {
	g, _, shop := start(t)
	tcp := jetwaytest.ServeTCP(t, g.Edge)
	for _, transport := range []string{"sse", "ws", "tcp"} {
		url := g.URL
		if transport == "tcp" {
			url = tcp
		}
		c, err := pushclient.Dial(context.Background(), pushclient.Options{Edge: url, Topic: "orders", Transport: transport, Header: http.Header{"X-Api-Key": {shop}}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
			t.Fatalf("%+v %v", ev, err)
		}
		app := g.EdgeWatcher.Current().Apps["shop"]
		off := *app
		off.Status = registry.AppDisabled
		g.PutApps(&off)
		ev, err := c.Next(ctx)
		var ce *pushclient.CloseError
		switch transport {
		case "sse":
			if err != nil || ev.Type != "close" || !strings.Contains(ev.Reason, "disabled") {
				t.Errorf("sse: %+v %v", ev, err)
			}
		default:
			if !errors.As(err, &ce) || ce.Code != 4001 || !strings.Contains(ce.Reason, "disabled") {
				t.Errorf("%s: %+v %v", transport, ev, err)
			}
		}
		on := off
		on.Status = registry.AppActive
		g.PutApps(&on)
	}
}

// A shutting-down edge tells its WebSocket and TCP clients to reconnect
// (1012).
func TestShutdownSaysReconnect(t *testing.T) {
	g, _, shop := start(t)
	var conns []*pushclient.Conn
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for transport, url := range map[string]string{"ws": g.URL, "tcp": jetwaytest.ServeTCP(t, g.Edge)} {
		c, err := pushclient.Dial(ctx, pushclient.Options{Edge: url, Topic: "orders", Transport: transport, Header: http.Header{"X-Api-Key": {shop}}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
			t.Fatalf("%s: %+v %v", transport, ev, err)
		}
		conns = append(conns, c)
	}
	go g.Push.Close(ctx)
	for _, c := range conns {
		_, err := c.Next(ctx)
		var ce *pushclient.CloseError
		if !errors.As(err, &ce) || ce.Code != 1012 || !strings.Contains(ce.Reason, "reconnect") {
			t.Errorf("%v", err)
		}
	}
}

// A publish retried with its Idempotency-Key is stored once.
func TestIdempotentPublish(t *testing.T) {
	g, pub, _ := start(t)
	a := publish(t, g, pub, "", "once", "Idempotency-Key", "k1")
	r := g.Do("POST", "/_jetway/publish/orders", strings.NewReader("once"), "X-Api-Key", pub, "Idempotency-Key", "k1")
	if r.Status != 200 || !strings.Contains(r.Body, `"duplicate":true`) || !strings.Contains(r.Body, a) {
		t.Fatalf("retry: %d %s (first %s)", r.Status, r.Body, a)
	}
}

// A client's frame over 64 KiB closes with 1009; a text frame that is not
// UTF-8 with 1007.
func TestWebSocketFrameLimits(t *testing.T) {
	g, _, shop := start(t)
	for _, c := range []struct {
		name  string
		frame []byte
		code  websocket.StatusCode
	}{
		{"too large", []byte(`{"type":"ping","pad":"` + strings.Repeat("x", push.MaxInboundFrame) + `"}`), websocket.StatusMessageTooBig},
		{"not UTF-8", []byte("{\"type\":\"\xff\"}"), websocket.StatusInvalidFramePayloadData},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(g.URL, "http")+"/_jetway/ws/orders", &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {shop}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.Write(ctx, websocket.MessageText, c.frame); err != nil {
			t.Fatal(err)
		}
		var got error
		for got == nil {
			_, _, got = conn.Read(ctx)
		}
		if st := websocket.CloseStatus(got); st != c.code {
			t.Errorf("%s: %v", c.name, got)
		}
		conn.CloseNow()
	}
}

// A latest_only topic keeps each address's newest value: a client that
// comes back gets only that.
func TestLatestOnly(t *testing.T) {
	g, pub, shop := start(t)
	g.PutTopic(`{"name":"prices","mode":"latest_only","publish":["pub"],"subscribe":["*"]}`)
	post := func(query, data string) {
		if r := g.Do("POST", "/_jetway/publish/prices"+query, strings.NewReader(data), "X-Api-Key", pub); r.Status != 200 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	}
	post("?key=apple", "1")
	post("?key=pear", "5")
	post("?key=apple", "2")
	post("?key=apple", "3")
	c, err := pushclient.Dial(context.Background(), pushclient.Options{Edge: g.URL, Topic: "prices", Header: http.Header{"X-Api-Key": {shop}}, From: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if a, b := next(t, c), next(t, c); a.Data != "5" || b.Data != "3" {
		t.Fatalf("got %q then %q, want the newest of each key: 5, 3", a.Data, b.Data)
	}
}

// A best_effort publish is answered before it is stored, with 202.
func TestBestEffort(t *testing.T) {
	g, pub, shop := start(t)
	g.PutTopic(`{"name":"ticks","mode":"best_effort","publish":["pub"],"subscribe":["*"]}`)
	c, err := pushclient.Dial(context.Background(), pushclient.Options{Edge: g.URL, Topic: "ticks", Header: http.Header{"X-Api-Key": {shop}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
		t.Fatalf("%+v %v", ev, err)
	}
	if r := g.Do("POST", "/_jetway/publish/ticks", strings.NewReader("t1"), "X-Api-Key", pub); r.Status != 202 || !strings.Contains(r.Body, `"stored":false`) {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	if ev := next(t, c); ev.Data != "t1" {
		t.Fatalf("%+v", ev)
	}
}

// A batch publish stores its messages in order and answers for each; a
// bad one does not keep the others out.
func TestBatchPublish(t *testing.T) {
	g, pub, shop := start(t)
	c, err := pushclient.Dial(context.Background(), pushclient.Options{Edge: g.URL, Topic: "orders", Header: http.Header{"X-Api-Key": {shop}}, Device: "d1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
		t.Fatalf("%+v %v", ev, err)
	}
	body := `{"messages":[{"data":"a"},{"data":"b","to":"user","app":"shop"},{"data":"c","to":"device","app":"shop","device":"d1","idempotency_key":"k"},{"data":"c","to":"device","app":"shop","device":"d1","idempotency_key":"k"}]}`
	r := g.Do("POST", "/_jetway/publish/orders/batch", strings.NewReader(body), "X-Api-Key", pub)
	var out struct {
		Topic   string
		Results []struct {
			Seq       uint64
			Cursor    string
			Duplicate bool
			Stored    bool
			Error     string
		}
	}
	if err := json.Unmarshal([]byte(r.Body), &out); err != nil || r.Status != 200 || len(out.Results) != 4 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	res := out.Results
	if !res[0].Stored || res[1].Stored || !strings.Contains(res[1].Error, `"to"`) || !res[2].Stored || !res[3].Duplicate || res[3].Seq != res[2].Seq || res[2].Seq <= res[0].Seq {
		t.Fatalf("%s", r.Body)
	}
	for _, want := range []string{"a", "c"} {
		if ev := next(t, c); ev.Data != want {
			t.Fatalf("got %+v, want %q", ev, want)
		}
	}
	for _, bad := range []string{`{"messages":[]}`, `{"messages":[{"data":1}]}`, `{"messages":[{"data":"x","bogus":1}]}`, `[]`, `{"messages":[{"data":"x"}]} {}`} {
		if r := g.Do("POST", "/_jetway/publish/orders/batch", strings.NewReader(bad), "X-Api-Key", pub); r.Status != 400 {
			t.Errorf("%s: %d %s", bad, r.Status, r.Body)
		}
	}
	if r := g.Do("POST", "/_jetway/publish/orders/batch", strings.NewReader(`{"messages":[{"data":"x"}]}`), "X-Api-Key", shop); r.Status != 403 {
		t.Errorf("a batch from an app that may not publish: %d %s", r.Status, r.Body)
	}
}

// Admission: an app over its connection cap gets 429, a connect past the
// edge's rate 503, both with Retry-After; a connection that ends frees
// its place. The counters and the delivery histogram are on /metrics.
func TestAdmissionAndMetrics(t *testing.T) {
	g := jetwaytest.StartWith(t, jetwaytest.Options{Push: push.Options{MaxConnsPerApp: 1, ConnectRate: 3}})
	g.PutTopic(topic)
	pub, shop := g.PutKeyedApp("pub"), g.PutKeyedApp("shop")
	dial := func() (*pushclient.Conn, error) {
		return pushclient.Dial(context.Background(), pushclient.Options{Edge: g.URL, Topic: "orders", Transport: "ws", Header: http.Header{"X-Api-Key": {shop}}})
	}
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	r := g.Do("GET", "/_jetway/sse/orders", nil, "X-Api-Key", shop)
	if r.Status != 429 || r.Code != "RATE_LIMITED" || r.Header.Get("Retry-After") == "" {
		t.Errorf("over the app's cap: %d %s %v", r.Status, r.Body, r.Header)
	}
	publish(t, g, pub, "", "one")
	if ev := next(t, c); ev.Data != "one" {
		t.Fatalf("%+v", ev)
	}
	c.Close()
	natstestCheck(t, 5*time.Second, func() error {
		if st := g.Push.Stats(); st.Connections != 0 {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	// Its place is free again; the rate (3 a second) refuses the rest.
	var refused *pushclient.HTTPError
	for i := range 5 {
		c, err := dial()
		if err == nil {
			c.Close()
			natstestCheck(t, 5*time.Second, func() error {
				if st := g.Push.Stats(); st.Connections != 0 {
					return fmt.Errorf("%+v", st)
				}
				return nil
			})
			continue
		}
		if !errors.As(err, &refused) || refused.Status != 503 || refused.Code != "OVERLOADED" {
			t.Fatalf("connect %d: %v", i, err)
		}
		break
	}
	if refused == nil {
		t.Fatal("5 connects in a second at a rate of 3: none refused")
	}
	var b strings.Builder
	if err := g.Push.WritePrometheus(&b, "n1"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`jetway_push_delivered_total{node="n1"} 1`, `jetway_push_refused_total{node="n1"} 2`, `jetway_push_delivery_seconds_count{node="n1"} 1`, `jetway_push_connections{node="n1"} 0`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, b.String())
		}
	}
}

// A browser cannot set a WebSocket's headers: its credentials come as a
// subprotocol beside jetway.v1, which the edge selects.
func TestWebSocketSubprotocolCredentials(t *testing.T) {
	g, pub, shop := start(t)
	url := "ws" + strings.TrimPrefix(g.URL, "http") + "/_jetway/ws/orders"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: []string{"jetway.v1", "jetway.key." + shop}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if c.Subprotocol() != "jetway.v1" {
		t.Errorf("selected %q", c.Subprotocol())
	}
	if _, b, err := c.Read(ctx); err != nil || !strings.Contains(string(b), `"ready"`) {
		t.Fatalf("%s %v", b, err)
	}
	publish(t, g, pub, "", "hi")
	if _, b, err := c.Read(ctx); err != nil || !strings.Contains(string(b), `"data":"hi"`) {
		t.Fatalf("%s %v", b, err)
	}
	for _, c := range []struct {
		protos []string
		status int
	}{
		{[]string{"jetway.key." + shop}, 400},                   // without jetway.v1
		{[]string{"jetway.v1", "jetway.key.jw_nope"}, 401},      // a bad key
		{[]string{"jetway.v1", "jetway.bearer.not.a.jwt"}, 401}, // a bad token
		{[]string{"jetway.v1"}, 401},                            // none
	} {
		_, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{Subprotocols: c.protos})
		if err == nil || resp == nil || resp.StatusCode != c.status {
			t.Errorf("%v: %v %v", c.protos, resp, err)
		}
	}
}

// An operator sees an edge's connections and ends an app's.
func TestConnectionsAndKick(t *testing.T) {
	g, _, shop := start(t)
	other := g.PutKeyedApp("other")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial := func(key, transport, device string) *pushclient.Conn {
		c, err := pushclient.Dial(ctx, pushclient.Options{Edge: g.URL, Topic: "orders", Transport: transport, Header: http.Header{"X-Api-Key": {key}}, Device: device})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
			t.Fatalf("%+v %v", ev, err)
		}
		return c
	}
	a, b, o := dial(shop, "ws", "d1"), dial(shop, "sse", ""), dial(other, "ws", "")
	defer a.Close()
	defer b.Close()
	defer o.Close()
	conns := g.Push.Connections("shop", 0)
	if len(conns) != 2 || conns[0].Device != "d1" || conns[0].Transport != "ws" || conns[1].Transport != "sse" || conns[0].Topic != "orders" {
		t.Fatalf("%+v", conns)
	}
	if n := len(g.Push.Connections("", 0)); n != 3 {
		t.Errorf("%d connections in all", n)
	}
	if n := g.Push.Kick("shop", "", "ended by an operator"); n != 2 {
		t.Errorf("kicked %d", n)
	}
	if _, err := a.Next(ctx); err == nil || !strings.Contains(err.Error(), "operator") {
		t.Errorf("ws: %v", err)
	}
	if ev, err := b.Next(ctx); err != nil || ev.Type != "close" {
		t.Errorf("sse: %+v %v", ev, err)
	}
	natstestCheck(t, 5*time.Second, func() error {
		if n := len(g.Push.Connections("", 0)); n != 1 {
			return fmt.Errorf("%d connections left", n)
		}
		return nil
	})
}
