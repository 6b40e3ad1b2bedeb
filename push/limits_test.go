package push_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/push"
	"github.com/jetway-gw/jetway/push/pushclient"
	"github.com/jetway-gw/jetway/registry"
)

// promText is the push server's metrics, labelled node="n1".
func promText(t *testing.T, p *push.Server) string {
	t.Helper()
	var b strings.Builder
	if err := p.WritePrometheus(&b, "n1"); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// promValue is the value of one series ("name{labels}") in text; -1 when
// it is not there.
func promValue(text, series string) int64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// disconnects is the series of the disconnects counter of one reason.
func disconnects(reason string) string {
	return `jetway_push_disconnects_total{node="n1",reason="` + reason + `"}`
}

// waitMetric waits until a series has the value want.
func waitMetric(t *testing.T, p *push.Server, series string, want int64) {
	t.Helper()
	natstestCheck(t, 5*time.Second, func() error {
		if got := promValue(promText(t, p), series); got != want {
			return fmt.Errorf("%s = %d, want %d", series, got, want)
		}
		return nil
	})
}

func wsURL(g *jetwaytest.Gateway, query string) string {
	return "ws" + strings.TrimPrefix(g.URL, "http") + "/_jetway/ws/orders" + query
}

// Every frame a client sends counts against its connection's command
// rate — a text frame of any type, a WebSocket ping, a TCP frame — and a
// client past it is closed with 1008 and why, over either transport; a
// client that acks every message it gets is never past it, however fast
// they come (each message written earns its ack).
func TestCommandRate(t *testing.T) {
	g := jetwaytest.StartWith(t, jetwaytest.Options{Push: push.Options{CommandsPerSecond: 1, CommandBurst: 5}})
	g.PutTopic(topic)
	pub, shop := g.PutKeyedApp("pub"), g.PutKeyedApp("shop")
	tcpAddr := jetwaytest.ServeTCP(t, g.Edge)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// An acker of every message, over WebSocket and TCP: 60 acks in
	// well under a second, at a rate of 1 with bursts of 5.
	for _, tr := range []struct{ transport, url string }{{"ws", g.URL}, {"tcp", tcpAddr}} {
		c, err := pushclient.Dial(ctx, pushclient.Options{Edge: tr.url, Topic: "orders", Transport: tr.transport, Header: http.Header{"X-Api-Key": {shop}}})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
			t.Fatalf("%s: %+v %v", tr.transport, ev, err)
		}
		acks := g.Push.Stats().Acks
		var batch strings.Builder
		batch.WriteString(`{"messages":[`)
		for i := range 60 {
			if i > 0 {
				batch.WriteString(",")
			}
			fmt.Fprintf(&batch, `{"data":"m%d"}`, i)
		}
		batch.WriteString(`]}`)
		if r := g.Do("POST", "/_jetway/publish/orders/batch", strings.NewReader(batch.String()), "X-Api-Key", pub); r.Status != 200 {
			t.Fatalf("batch: %d %s", r.Status, r.Body)
		}
		for i := range 60 {
			ev := next(t, c)
			if ev.Data != fmt.Sprint("m", i) {
				t.Fatalf("%s: message %d: %+v", tr.transport, i, ev)
			}
			if err := c.Ack(ctx, ev.Cursor); err != nil {
				t.Fatalf("%s: ack %d: %v", tr.transport, i, err)
			}
		}
		natstestCheck(t, 5*time.Second, func() error {
			if got := g.Push.Stats().Acks - acks; got != 60 {
				return fmt.Errorf("%s: %d acks taken", tr.transport, got)
			}
			return nil
		})
		publish(t, g, pub, "", "still here")
		if ev := next(t, c); ev.Data != "still here" {
			t.Fatalf("%s: the acker was closed: %+v", tr.transport, ev)
		}
		c.Close()
	}

	// WebSocket text frames past the rate.
	ws, _, err := websocket.Dial(ctx, wsURL(g, ""), &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {shop}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if _, b, err := ws.Read(ctx); err != nil || !strings.Contains(string(b), `"ready"`) {
		t.Fatalf("%s %v", b, err)
	}
	for range 30 {
		if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"hello"}`)); err != nil {
			break // closed under the writes
		}
	}
	var got error
	for got == nil {
		_, _, got = ws.Read(ctx)
	}
	var ce websocket.CloseError
	if !errors.As(got, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "too many commands") {
		t.Errorf("a flood of text frames: %v", got)
	}

	// WebSocket pings past the rate: not answered, and closed.
	ws, _, err = websocket.Dial(ctx, wsURL(g, ""), &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {shop}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	readErr := make(chan error, 1)
	go func() { // reads the pongs for Ping, and the close
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				readErr <- err
				return
			}
		}
	}()
	pongs := 0
pinging:
	for range 30 {
		pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := ws.Ping(pctx)
		pcancel()
		if err == nil {
			pongs++
		}
		select {
		case got = <-readErr:
			break pinging
		default:
		}
	}
	if got == nil {
		got = <-readErr
	}
	if !errors.As(got, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "too many commands") || pongs > 10 {
		t.Errorf("a flood of pings: %v after %d pongs", got, pongs)
	}

	// TCP frames past the rate.
	r := dialRaw(t, tcpAddr)
	r.connect("/_jetway/tcp/orders", map[string]string{"X-Api-Key": shop})
	if f := r.read(); f == nil || f["type"] != "ready" {
		t.Fatal(f)
	}
	// One past the burst, and no more: the edge closes a connection
	// whose client's frames it has not all read with a reset, which could
	// overtake the close frame.
	for range 6 {
		r.send(`{"type":"hello"}`)
	}
	var last map[string]any
	for f := r.read(); f != nil; f = r.read() {
		last = f
	}
	if last == nil || last["type"] != "close" || last["code"] != float64(1008) || !strings.Contains(fmt.Sprint(last["reason"]), "too many commands") {
		t.Errorf("a flood of TCP frames: last frame %v", last)
	}
	waitMetric(t, g.Push, disconnects("too_many_commands"), 3)
}

// Every end of a connection is counted by why, on /metrics and in Stats.
func TestDisconnectReasons(t *testing.T) {
	g, pub, shop := start(t)
	other := g.PutKeyedApp("other")
	tcpAddr := jetwaytest.ServeTCP(t, g.Edge)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func(key, transport, edge string) *pushclient.Conn {
		t.Helper()
		c, err := pushclient.Dial(ctx, pushclient.Options{Edge: edge, Topic: "orders", Transport: transport, Header: http.Header{"X-Api-Key": {key}}})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
			t.Fatalf("%+v %v", ev, err)
		}
		return c
	}
	// The client leaves: over WebSocket, SSE and TCP.
	for _, tr := range []string{"ws", "sse", "tcp"} {
		edge := g.URL
		if tr == "tcp" {
			edge = tcpAddr
		}
		dial(shop, tr, edge).Close()
	}
	waitMetric(t, g.Push, disconnects("client_gone"), 3)
	// An operator kicks.
	c := dial(shop, "ws", g.URL)
	g.Push.Kick("shop", "", "ended by an operator")
	if _, err := c.Next(ctx); err == nil {
		t.Fatal("kicked, still open")
	}
	c.Close()
	waitMetric(t, g.Push, disconnects("kicked"), 1)
	// A bad ack: past what the connection was sent.
	c = dial(shop, "ws", g.URL)
	one := publish(t, g, pub, "", "one")
	if ev := next(t, c); ev.Cursor != one {
		t.Fatalf("%+v", ev)
	}
	epoch, _, _ := strings.Cut(one, ":")
	_ = c.Ack(ctx, fmt.Sprintf("%s:%d", epoch, seqOf(one)+100))
	var ce *pushclient.CloseError
	if _, err := c.Next(ctx); !errors.As(err, &ce) || ce.Code != 1008 {
		t.Errorf("bad ack: %v", err)
	}
	c.Close()
	waitMetric(t, g.Push, disconnects("bad_command"), 1)
	// Frames that are not JSON (TCP), too large (WebSocket).
	r := dialRaw(t, tcpAddr)
	r.connect("/_jetway/tcp/orders", map[string]string{"X-Api-Key": shop})
	if f := r.read(); f == nil || f["type"] != "ready" {
		t.Fatal(f)
	}
	r.send("{not json")
	for r.read() != nil {
	}
	ws, _, err := websocket.Dial(ctx, wsURL(g, ""), &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {shop}}})
	if err != nil {
		t.Fatal(err)
	}
	_ = ws.Write(ctx, websocket.MessageText, []byte(`{"pad":"`+strings.Repeat("x", push.MaxInboundFrame)+`"}`))
	for err == nil {
		_, _, err = ws.Read(ctx)
	}
	ws.CloseNow()
	waitMetric(t, g.Push, disconnects("frame_error"), 2)
	// The app is disabled.
	c = dial(other, "sse", g.URL)
	app := *g.EdgeWatcher.Current().Apps["other"]
	app.Status = registry.AppDisabled
	g.PutApps(&app)
	if ev, err := c.Next(ctx); err != nil || ev.Type != "close" {
		t.Errorf("revoked: %+v %v", ev, err)
	}
	c.Close()
	waitMetric(t, g.Push, disconnects("revoked"), 1)
	// The edge shuts down under the last one.
	c = dial(shop, "tcp", tcpAddr)
	defer c.Close()
	if err := g.Push.Close(ctx); err != nil {
		t.Fatal(err)
	}
	text := promText(t, g.Push)
	for reason, want := range map[string]int64{"client_gone": 3, "kicked": 1, "bad_command": 1, "frame_error": 2, "revoked": 1, "shutdown": 1,
		"too_many_commands": 0, "expired": 0, "write_timeout": 0, "ping_timeout": 0, "error": 0} {
		if got := promValue(text, disconnects(reason)); got != want {
			t.Errorf("%s: %d, want %d", reason, got, want)
		}
		if got := g.Push.Stats().Disconnects[reason]; got != want {
			t.Errorf("Stats: %s: %d, want %d", reason, got, want)
		}
	}
	if !strings.Contains(text, "# TYPE jetway_push_disconnects_total counter") {
		t.Errorf("no TYPE line:\n%s", text)
	}
}

// A connection's lag — how far its topic's newest message is ahead of
// what it has been written — shows in the connections listing and as the
// topic's most on /metrics: a client that does not read lags, one that
// reads does not, nor one that nothing is for; once the first reads, it
// is back to 0.
func TestConnectionsLag(t *testing.T) {
	g := jetwaytest.StartWith(t, jetwaytest.Options{Push: push.Options{WriteTimeout: time.Minute}})
	g.PutTopic(topic)
	pub, shop, other := g.PutKeyedApp("pub"), g.PutKeyedApp("shop"), g.PutKeyedApp("other")
	tcpAddr := jetwaytest.ServeTCP(t, g.Edge)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// stuck reads nothing for now.
	stuck := dialRaw(t, tcpAddr)
	_ = stuck.c.SetDeadline(time.Now().Add(time.Minute))
	stuck.connect("/_jetway/tcp/orders?device=stuck", map[string]string{"X-Api-Key": shop})
	if f := stuck.read(); f == nil || f["type"] != "ready" {
		t.Fatal(f)
	}
	reader, err := pushclient.Dial(ctx, pushclient.Options{Edge: g.URL, Topic: "orders", Transport: "ws", Device: "reader", Header: http.Header{"X-Api-Key": {shop}}})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	quiet, err := pushclient.Dial(ctx, pushclient.Options{Edge: g.URL, Topic: "orders", Transport: "ws", Header: http.Header{"X-Api-Key": {other}}})
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	for _, c := range []*pushclient.Conn{reader, quiet} {
		if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
			t.Fatalf("%+v %v", ev, err)
		}
	}
	var read atomic.Int64
	go func() { // the reader reads everything for shop
		for {
			ev, err := reader.Next(ctx)
			if err != nil {
				return
			}
			if ev.Type == "message" {
				read.Add(1)
			}
		}
	}()
	lagOf := func() map[string]uint64 {
		m := map[string]uint64{}
		for _, c := range g.Push.Connections("", 0) {
			m[c.App+"/"+c.Device] = c.Lag
		}
		return m
	}
	pad := strings.Repeat("x", 100<<10)
	var batch strings.Builder
	batch.WriteString(`{"messages":[`)
	for i := range 60 {
		if i > 0 {
			batch.WriteString(",")
		}
		fmt.Fprintf(&batch, `{"data":"%d %s","to":"app","app":"shop"}`, i, pad)
	}
	batch.WriteString(`]}`)
	published := 0
	for lagOf()["shop/stuck"] == 0 {
		if published >= 20*60 {
			t.Fatalf("%d messages of 100 KiB and the client that does not read lags by none: %v", published, lagOf())
		}
		if r := g.Do("POST", "/_jetway/publish/orders/batch", strings.NewReader(batch.String()), "X-Api-Key", pub); r.Status != 200 {
			t.Fatalf("batch: %d %s", r.Status, r.Body)
		}
		published += 60
		time.Sleep(50 * time.Millisecond) // the writers' turn
	}
	// The lag and the metric, read together (the stuck client's socket
	// still takes a little now and then: its lag moves between reads).
	series := `jetway_push_max_lag{node="n1",topic="orders"}`
	natstestCheck(t, 10*time.Second, func() error {
		l := lagOf()
		if l["shop/reader"] != 0 || l["other/"] != 0 || l["shop/stuck"] == 0 {
			return fmt.Errorf("lags %v: want the stuck client's only", l)
		}
		if got := promValue(promText(t, g.Push), series); got != int64(l["shop/stuck"]) || lagOf()["shop/stuck"] != l["shop/stuck"] {
			return fmt.Errorf("%s = %d, want the stuck client's %d", series, got, l["shop/stuck"])
		}
		return nil
	})
	// It reads now: everything comes, and its lag is gone.
	n := 0
	for n < published {
		f := stuck.read()
		if f == nil {
			t.Fatalf("stuck: closed after %d of %d messages", n, published)
		}
		if f["type"] == "message" {
			n++
		}
	}
	natstestCheck(t, 10*time.Second, func() error {
		if l := lagOf(); l["shop/stuck"] != 0 || l["shop/reader"] != 0 {
			return fmt.Errorf("lags %v", l)
		}
		return nil
	})
	waitMetric(t, g.Push, series, 0)
	// A lag of 0 says the edge wrote everything to the reader's socket,
	// not that the reader has read it all yet.
	natstestCheck(t, 10*time.Second, func() error {
		if got := read.Load(); got != int64(published) {
			return fmt.Errorf("the reader got %d of %d", got, published)
		}
		return nil
	})
	b, _ := json.Marshal(g.Push.Connections("", 0))
	if !strings.Contains(string(b), `"lag":0`) {
		t.Errorf("listing: %s", b)
	}
}
