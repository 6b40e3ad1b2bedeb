package push_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/push"
	"github.com/jetway-gw/jetway/push/pushclient"
)

// A producer that asks for receipts learns each write of its message to a
// client — app, device, transport, time — once per subscriber, on any
// edge; only it may read them, and a broadcast has none.
func TestDeliveryReceipts(t *testing.T) {
	g, pub, shop := start(t)
	edge2, _, _ := g.AddEdge(t, edgeOptions())
	r := g.Do("POST", "/_jetway/publish/orders?to=device&app=shop&device=d1&receipt=1", strings.NewReader("coupon"), "X-Api-Key", pub)
	var p struct{ Seq uint64 }
	if r.Status != 200 || json.Unmarshal([]byte(r.Body), &p) != nil || p.Seq == 0 {
		t.Fatalf("publish: %d %s", r.Status, r.Body)
	}
	read := func(key string) (int, []push.Receipt) {
		r := g.Do("GET", fmt.Sprintf("/_jetway/receipts/orders?seq=%d", p.Seq), nil, "X-Api-Key", key)
		var out struct{ Receipts []push.Receipt }
		_ = json.Unmarshal([]byte(r.Body), &out)
		return r.Status, out.Receipts
	}
	if st, rs := read(pub); st != 200 || len(rs) != 0 {
		t.Fatalf("before any delivery: %d %v", st, rs)
	}
	// Written to device d1 over WebSocket on the second edge, twice (it
	// comes back from the start): one receipt.
	for range 2 {
		c, err := pushclient.Dial(context.Background(), pushclient.Options{Edge: edge2, Topic: "orders", Transport: "ws", Header: http.Header{"X-Api-Key": {shop}}, Device: "d1", From: "0"})
		if err != nil {
			t.Fatal(err)
		}
		if ev := next(t, c); ev.Data != "coupon" {
			t.Fatalf("%+v", ev)
		}
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, rs := read(pub)
		if st == 200 && len(rs) == 1 {
			if r := rs[0]; r.App != "shop" || r.Device != "d1" || r.Transport != "ws" || r.Seq != p.Seq || r.At.IsZero() {
				t.Fatalf("receipt: %+v", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("receipts: %d %+v", st, rs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Pulled by device d1's other client: that is a write too, of its own
	// transport — the same subscriber, so still one receipt.
	if pp, err := pushclient.Pull(context.Background(), pushclient.Options{Edge: g.URL, Topic: "orders", Header: http.Header{"X-Api-Key": {shop}}, Device: "d1", From: "0"}, 0, 0); err != nil || len(pp.Messages) != 1 {
		t.Fatalf("pull: %+v %v", pp, err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, rs := read(pub); len(rs) != 1 {
		t.Errorf("a second write to the same subscriber: %+v", rs)
	}
	// Only a publisher reads receipts, and only of its own messages.
	if st, _ := read(shop); st != 403 {
		t.Errorf("a subscriber read receipts: %d", st)
	}
	g.PutTopic(`{"name":"orders","publish":["pub","pub2"],"subscribe":["*"],"origins":["https://shop.example"]}`)
	pub2 := g.PutKeyedApp("pub2")
	time.Sleep(200 * time.Millisecond)
	if st, rs := read(pub2); st != 200 || len(rs) != 0 {
		t.Errorf("another publisher read pub's receipts: %d %v", st, rs)
	}
	// A broadcast has none to ask for; a bad seq is refused.
	if r := g.Do("POST", "/_jetway/publish/orders?receipt=1", strings.NewReader("all"), "X-Api-Key", pub); r.Status != 400 {
		t.Errorf("a broadcast with receipts: %d %s", r.Status, r.Body)
	}
	if r := g.Do("POST", "/_jetway/publish/orders?to=app&app=shop&receipt=1", strings.NewReader("all of shop"), "X-Api-Key", pub); r.Status != 400 {
		t.Errorf("a message to a whole app with receipts: %d %s", r.Status, r.Body)
	}
	if r := g.Do("GET", "/_jetway/receipts/orders?seq=x", nil, "X-Api-Key", pub); r.Status != 400 {
		t.Errorf("seq=x: %d %s", r.Status, r.Body)
	}
	// And no subscriber ever receives a receipt.
	pp, err := pushclient.Pull(context.Background(), pushclient.Options{Edge: g.URL, Topic: "orders", Header: http.Header{"X-Api-Key": {shop}}, Device: "d1", From: "0"}, 0, 0)
	if err != nil || len(pp.Messages) != 1 {
		t.Fatalf("the topic's messages: %+v %v", pp, err)
	}
}
