package push_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/push/pushclient"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/sign"
)

// sseEvent is one event of an SSE stream.
type sseEvent struct{ id, event, data string }

// sseEvents opens an SSE stream with req and returns its events as they
// come, until ctx ends or the stream does.
func sseEvents(t *testing.T, req *http.Request) <-chan sseEvent {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("%s: %d %s", req.URL, resp.StatusCode, b)
	}
	out := make(chan sseEvent, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev != (sseEvent{}) {
					out <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				ev.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return out
}

// nextSSE returns the next event that is not a comment-only one.
func nextSSE(t *testing.T, evs <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-evs:
		if !ok {
			t.Fatal("the stream ended")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return sseEvent{}
}

// A browser's EventSource reconnects with the last id it got as
// Last-Event-ID: the stream goes on with everything after it, in order —
// over after=ack, which is older — then live messages.
func TestSSEReconnectWithLastEventID(t *testing.T) {
	g, pub, shop := start(t)
	type msg struct{ cursor, data string }
	var all []msg
	for i := range 5 {
		d := fmt.Sprint("m", i)
		all = append(all, msg{publish(t, g, pub, "", d), d})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, query := range []string{"", "?after=ack"} {
		req, _ := http.NewRequestWithContext(ctx, "GET", g.URL+"/_jetway/sse/orders"+query, nil)
		req.Header.Set("X-Api-Key", shop)
		req.Header.Set("Last-Event-ID", all[1].cursor)
		evs := sseEvents(t, req)
		if ev := nextSSE(t, evs); ev.event != "ready" || !strings.Contains(ev.data, `"cursor":"`+all[1].cursor+`"`) {
			t.Fatalf("%q: %+v", query, ev)
		}
		for _, m := range all[2:] {
			if ev := nextSSE(t, evs); ev.id != m.cursor || ev.data != m.data || ev.event != "" {
				t.Fatalf("%q: got %+v, want %+v", query, ev, m)
			}
		}
		live := msg{data: "live" + query}
		live.cursor = publish(t, g, pub, "", live.data)
		all = append(all, live)
		if ev := nextSSE(t, evs); ev.id != live.cursor || ev.data != live.data {
			t.Fatalf("%q: live: %+v", query, ev)
		}
	}
}

// An app the topic's subscribe grant does not name is refused, 403, over
// every transport, its acks too; one the grant's glob names is served.
func TestSubscribeGrantRefuses(t *testing.T) {
	g := jetwaytest.Start(t)
	g.PutTopic(`{"name":"partners","publish":["pub"],"subscribe":["partner.*"]}`)
	shop, partner := g.PutKeyedApp("shop"), g.PutKeyedApp("partner.acme")
	tcpAddr := jetwaytest.ServeTCP(t, g.Edge)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/_jetway/sse/partners", ""},
		{"GET", "/_jetway/ws/partners", ""},
		{"GET", "/_jetway/pull/partners", ""},
		{"POST", "/_jetway/ack/partners", `{"cursor":"1"}`},
	} {
		r := g.Do(c.method, c.path, strings.NewReader(c.body), "X-Api-Key", shop)
		if r.Status != 403 || r.Code != "FORBIDDEN" || !strings.Contains(r.Body, "may not subscribe") {
			t.Errorf("%s %s: %d %s", c.method, c.path, r.Status, r.Body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for transport, url := range map[string]string{"ws": g.URL, "tcp": tcpAddr, "sse": g.URL} {
		_, err := pushclient.Dial(ctx, pushclient.Options{Edge: url, Topic: "partners", Transport: transport, Header: http.Header{"X-Api-Key": {shop}}})
		var he *pushclient.HTTPError
		if !errors.As(err, &he) || he.Status != 403 || he.Code != "FORBIDDEN" {
			t.Errorf("%s: %v", transport, err)
		}
		c, err := pushclient.Dial(ctx, pushclient.Options{Edge: url, Topic: "partners", Transport: transport, Header: http.Header{"X-Api-Key": {partner}}})
		if err != nil {
			t.Fatalf("%s: the granted app: %v", transport, err)
		}
		if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
			t.Errorf("%s: the granted app: %+v %v", transport, ev, err)
		}
		c.Close()
	}
}

// An app of a topic that takes signatures (hmac) subscribes — over SSE,
// WebSocket and TCP — and publishes with signed requests; a replayed
// signature, or one over another body, is refused.
func TestSignedSubscribeAndPublish(t *testing.T) {
	g := jetwaytest.Start(t)
	// Signed requests need the cluster's nonce store: an edge of its own.
	url, w, e := g.AddEdge(t, edge.Options{Nonces: registry.NewNonceStore(g.Conn, registry.BucketOptions{})})
	tcpAddr := jetwaytest.ServeTCP(t, e)
	secret, err := registry.NewHMACSecret()
	if err != nil {
		t.Fatal(err)
	}
	g.PutApps(&registry.App{ID: "signer", Status: registry.AppActive, APIs: []string{"*"}, HMACSecrets: []registry.HMACSecret{secret}})
	g.PutTopic(`{"name":"orders","publish":["signer"],"subscribe":["signer"],"auth":{"methods":["hmac"]}}`)
	natstestCheck(t, jetwaytest.Wait, func() error {
		if w.Current().Topics["orders"] == nil || w.Current().Apps["signer"] == nil {
			return errors.New("the signing edge has not the topic and the app")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	signed := func(method, target, body string) *http.Request {
		t.Helper()
		r, _ := http.NewRequestWithContext(ctx, method, target, strings.NewReader(body))
		if err := sign.Sign(r, []byte(body), "signer", secret.Bytes()); err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Signature headers of a GET of path, for a client that makes the
	// request itself (WebSocket, TCP).
	signedHeader := func(path string) http.Header {
		return http.Header{"Authorization": {signed("GET", url+path, "").Header.Get("Authorization")}}
	}
	evs := sseEvents(t, signed("GET", url+"/_jetway/sse/orders", ""))
	if ev := nextSSE(t, evs); ev.event != "ready" {
		t.Fatalf("sse: %+v", ev)
	}
	var conns []*pushclient.Conn
	for transport, edgeURL := range map[string]string{"ws": url, "tcp": tcpAddr} {
		c, err := pushclient.Dial(ctx, pushclient.Options{Edge: edgeURL, Topic: "orders", Transport: transport, Header: signedHeader("/_jetway/" + transport + "/orders")})
		if err != nil {
			t.Fatalf("%s: %v", transport, err)
		}
		defer c.Close()
		if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
			t.Fatalf("%s: %+v %v", transport, ev, err)
		}
		conns = append(conns, c)
	}
	pubReq := signed("POST", url+"/_jetway/publish/orders", "signed hello")
	resp, err := jetwaytest.Client.Do(pubReq)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"stored":true`) {
		t.Fatalf("signed publish: %d %s", resp.StatusCode, b)
	}
	if ev := nextSSE(t, evs); ev.data != "signed hello" {
		t.Errorf("sse: %+v", ev)
	}
	for _, c := range conns {
		if ev := next(t, c); ev.Data != "signed hello" {
			t.Errorf("%+v", ev)
		}
	}
	// The same signature again: its nonce is spent. A signature over
	// another body: refused before anything is stored.
	again, _ := http.NewRequestWithContext(ctx, "POST", url+"/_jetway/publish/orders", strings.NewReader("signed hello"))
	again.Header.Set("Authorization", pubReq.Header.Get("Authorization"))
	forged := signed("POST", url+"/_jetway/publish/orders", "what was signed")
	forged.Body, forged.ContentLength = io.NopCloser(strings.NewReader("something else")), int64(len("something else"))
	for name, r := range map[string]*http.Request{"replayed": again, "another body": forged} {
		resp, err := jetwaytest.Client.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("%s: %d %s", name, resp.StatusCode, b)
		}
	}
	// Unsigned, with nothing else the topic takes: refused.
	if r := jetwaytest.Do(t, url, "GET", "/_jetway/sse/orders", nil); r.Status != 401 {
		t.Errorf("unsigned: %d %s", r.Status, r.Body)
	}
}
