package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/admin"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/push/pushclient"
)

// Topics are written at their revision like every entry, by an admin; the
// edges' push side is asked over NATS: counters for a viewer, the
// connections and a kick for an operator.
func TestTopicsAndPushOverREST(t *testing.T) {
	g := jetwaytest.Start(t)
	srv := httptest.NewServer(admin.New(admin.Options{Client: g.Client, Bootstrap: boot, Conn: g.Conn}).Handler())
	t.Cleanup(srv.Close)
	e := &env{t: t, url: srv.URL, c: g.Client, nc: g.Conn}
	viewer, op := e.token("viewer"), e.token("operator")

	topic := `{"name":"orders","publish":["pub"],"subscribe":["shop"]}`
	if r := e.do(op, "PUT", "/v1/topics/orders", topic, "If-None-Match", "*"); r.status != 403 {
		t.Errorf("an operator writes a topic: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "PUT", "/v1/topics/orders", topic); r.status != 428 {
		t.Errorf("a write naming no revision: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "PUT", "/v1/topics/other", topic, "If-None-Match", "*"); r.status != 400 {
		t.Errorf("a topic under another name: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "PUT", "/v1/topics/orders", `{"name":"orders","mode":"sometimes"}`, "If-None-Match", "*"); r.status != 400 || r.err.Code != "INVALID_ENTRY" {
		t.Errorf("an invalid topic: %d %s", r.status, r.body)
	}
	put := e.do(boot, "PUT", "/v1/topics/orders", topic, "If-None-Match", "*")
	if put.status != 200 || put.header.Get("ETag") == "" {
		t.Fatalf("put: %d %s", put.status, put.body)
	}
	if r := e.do(boot, "PUT", "/v1/topics/orders", topic, "If-None-Match", "*"); r.status != 409 {
		t.Errorf("create it again: %d %s", r.status, r.body)
	}
	if r := e.do(viewer, "GET", "/v1/topics/orders", ""); r.status != 200 || r.header.Get("ETag") != put.header.Get("ETag") || !strings.Contains(r.body, `"subscribe":["shop"]`) {
		t.Errorf("get: %d %v %s", r.status, r.header, r.body)
	}
	if r := e.do(viewer, "GET", "/v1/topics", ""); r.status != 200 || !strings.Contains(r.body, `"name":"orders"`) {
		t.Errorf("list: %d %s", r.status, r.body)
	}
	if r := e.do(viewer, "GET", "/v1/topics/nope", ""); r.status != 404 {
		t.Errorf("get a missing one: %d %s", r.status, r.body)
	}

	// A subscriber on the edge, once it has the topic and the app.
	shop := g.PutKeyedApp("shop")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var c *pushclient.Conn
	for {
		var err error
		if c, err = pushclient.Dial(ctx, pushclient.Options{Edge: g.URL, Topic: "orders", Transport: "sse", Header: http.Header{"X-Api-Key": {shop}}, Device: "d1"}); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer c.Close()
	if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
		t.Fatalf("%+v %v", ev, err)
	}
	type answers struct {
		Items []struct {
			Edge        string
			Stats       *struct{ Connections int }
			Connections []struct{ App, Device, Topic string }
			Total       int
			Kicked      int
		}
	}
	read := func(r resp) answers {
		t.Helper()
		var a answers
		if r.status != 200 || json.Unmarshal([]byte(r.body), &a) != nil || len(a.Items) != 1 || a.Items[0].Edge == "" {
			t.Fatalf("%d %s", r.status, r.body)
		}
		return a
	}
	if a := read(e.do(viewer, "GET", "/v1/push/stats", "")); a.Items[0].Stats == nil || a.Items[0].Stats.Connections != 1 {
		t.Errorf("stats: %+v", a)
	}
	if r := e.do(viewer, "GET", "/v1/push/connections", ""); r.status != 403 {
		t.Errorf("a viewer lists connections (devices, users): %d %s", r.status, r.body)
	}
	if a := read(e.do(op, "GET", "/v1/push/connections?app=shop", "")); a.Items[0].Total != 1 || a.Items[0].Connections[0].Device != "d1" {
		t.Errorf("connections: %+v", a)
	}
	for _, q := range []string{"?app=a%20b", "?limit=0", "?limit=many"} {
		if r := e.do(op, "GET", "/v1/push/connections"+q, ""); r.status != 400 {
			t.Errorf("connections%s: %d %s", q, r.status, r.body)
		}
	}
	for _, body := range []string{``, `{}`, `{"app":"a b"}`, `{"app":"shop","topic":"*"}`, `{"app":"shop","topc":"orders"}`, `{"app":"shop"}{}`} {
		if r := e.do(op, "POST", "/v1/push/kick", body); r.status != 400 {
			t.Errorf("kick %s: %d %s", body, r.status, r.body)
		}
	}
	if r := e.do(viewer, "POST", "/v1/push/kick", `{"app":"shop"}`); r.status != 403 {
		t.Errorf("a viewer kicks: %d %s", r.status, r.body)
	}
	if a := read(e.do(op, "POST", "/v1/push/kick", `{"app":"shop"}`)); a.Items[0].Kicked != 1 {
		t.Errorf("kick: %+v", a)
	}
	if ev, err := c.Next(ctx); err != nil || ev.Type != "close" {
		t.Errorf("after the kick: %+v %v", ev, err)
	}
	if r := e.do(viewer, "GET", "/v1/audit?kind=push", ""); r.status != 200 || !strings.Contains(r.body, `"action":"kick"`) || !strings.Contains(r.body, `"key":"shop"`) || !strings.Contains(r.body, "operator-1") {
		t.Errorf("the kick in the audit trail: %d %s", r.status, r.body)
	}
	if r := e.do(viewer, "GET", "/v1/audit?kind=topic", ""); r.status != 200 || !strings.Contains(r.body, `"key":"orders"`) {
		t.Errorf("the topic in the audit trail: %d %s", r.status, r.body)
	}

	if r := e.do(boot, "DELETE", "/v1/topics/orders", "", "If-Match", `"999"`); r.status != 412 {
		t.Errorf("a stale delete: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "DELETE", "/v1/topics/orders", "", "If-Match", put.header.Get("ETag")); r.status != 204 {
		t.Errorf("delete: %d %s", r.status, r.body)
	}
}
