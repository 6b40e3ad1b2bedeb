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

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/push"
	"github.com/jetway-gw/jetway/push/pushclient"
)

// The cluster-wide caps count every edge's connections: an app at its cap
// over two edges is refused on either, with 429 and Retry-After; so is an
// address; a connection that ends gives its place back.
func TestClusterWideCaps(t *testing.T) {
	po := push.Options{ClusterMaxConnsPerApp: 2, ClusterMaxConnsPerIP: 3, CensusInterval: 50 * time.Millisecond}
	g := jetwaytest.StartWith(t, jetwaytest.Options{Push: po})
	g.PutTopic(topic)
	shop, other := g.PutKeyedApp("shop"), g.PutKeyedApp("other")
	// The second edge's push server is the test's, to stop it.
	nc, err := nats.Connect(g.Server.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	po.Conn = nc
	p2, err := push.New(po)
	if err != nil {
		t.Fatal(err)
	}
	eo := edgeOptions()
	eo.Push = p2
	url2, _, _ := g.AddEdge(t, eo)
	stopP2 := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p2.Close(ctx)
	}
	defer stopP2()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func(url, key string) (*pushclient.Conn, error) {
		c, err := pushclient.Dial(ctx, pushclient.Options{Edge: url, Topic: "orders", Transport: "ws", Header: http.Header{"X-Api-Key": {key}}})
		if err == nil {
			if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
				t.Fatalf("%+v %v", ev, err)
			}
		}
		return c, err
	}
	mustDial := func(url, key string) *pushclient.Conn {
		c, err := dial(url, key)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	conns := func(s *push.Server) int { return int(s.Stats().Connections) }
	// refused waits until a connect is refused with what (the census is
	// a moment old); one admitted meanwhile is closed again.
	refused := func(url, key, what string, s *push.Server) {
		t.Helper()
		natstestCheck(t, 10*time.Second, func() error {
			before := conns(s)
			c, err := dial(url, key)
			if err == nil {
				c.Close()
				natstestCheck(t, 5*time.Second, func() error {
					if n := conns(s); n != before {
						return fmt.Errorf("%d connections", n)
					}
					return nil
				})
				return errors.New("admitted")
			}
			var he *pushclient.HTTPError
			if !errors.As(err, &he) || he.Status != 429 || he.RetryAfter == 0 || !strings.Contains(he.Message, what) {
				t.Fatalf("refusal: %v", err)
			}
			return nil
		})
	}
	a1, a2 := mustDial(g.URL, shop), mustDial(url2, shop)
	defer a1.Close()
	refused(g.URL, shop, "across the cluster", g.Push)
	refused(url2, shop, "across the cluster", p2)
	// Another app may still come, up to the address's cap (3, and every
	// client here is 127.0.0.1) — once the census no longer counts the
	// connections refused() let in and closed again.
	var o1 *pushclient.Conn
	natstestCheck(t, 10*time.Second, func() error {
		var err error
		o1, err = dial(url2, other)
		return err
	})
	defer o1.Close()
	refused(g.URL, other, "from this address across the cluster", g.Push)

	// A connection that ends gives its place back, on the other edge too.
	a2.Close()
	natstestCheck(t, 10*time.Second, func() error {
		c, err := dial(g.URL, shop)
		if err != nil {
			return err
		}
		c.Close()
		return nil
	})
}

// A peer's census counts until the peer says it is gone; what a census
// may not say (names that are no app's, unmasked or foreign prefixes,
// counts under one) is ignored.
func TestCensusFromPeers(t *testing.T) {
	// No census of its own for a minute, and peers kept for three: only
	// what the test says counts.
	g := jetwaytest.StartWith(t, jetwaytest.Options{Push: push.Options{ClusterMaxConnsPerApp: 2, ClusterMaxConnsPerIP: 4, CensusInterval: time.Minute}})
	g.PutTopic(topic)
	shop, other := g.PutKeyedApp("shop"), g.PutKeyedApp("other")
	say := func(msg string) {
		t.Helper()
		if err := g.Conn.Publish(bus.PushCensusSubject, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admitted := func(key string) error {
		c, err := pushclient.Dial(ctx, pushclient.Options{Edge: g.URL, Topic: "orders", Transport: "sse", Header: http.Header{"X-Api-Key": {key}}})
		if err != nil {
			return err
		}
		c.Close()
		natstestCheck(t, 5*time.Second, func() error {
			if n := g.Push.Stats().Connections; n != 0 {
				return fmt.Errorf("%d connections", n)
			}
			return nil
		})
		return nil
	}
	refusedWith := func(key, what string) {
		t.Helper()
		natstestCheck(t, 10*time.Second, func() error {
			err := admitted(key)
			var he *pushclient.HTTPError
			if errors.As(err, &he) && he.Status == 429 && strings.Contains(he.Message, what) {
				return nil
			}
			return fmt.Errorf("not refused: %v", err)
		})
	}
	say(`{"edge":"peer-a","apps":{"shop":1000000}}`)
	refusedWith(shop, "app shop has 2 connections across the cluster") // counted up to the cap only
	say(`{"edge":"peer-a","gone":true}`)
	natstestCheck(t, 10*time.Second, func() error { return admitted(shop) })
	// Not to be counted; then one that is, to know the first was read.
	say(`{"edge":"peer-b","apps":{"a b":5,"shop":-3},"ips":{"127.0.0.1/8":9,"127.0.0.0/24":9,"::ffff:127.0.0.1/128":9,"nonsense":9}}`)
	say(`{"edge":"peer-c","apps":{"other":2}}`)
	refusedWith(other, "app other has")
	if err := admitted(shop); err != nil {
		t.Fatalf("shop refused after a census that may not count: %v", err)
	}
	// An address's count, as a peer says it.
	say(`{"edge":"peer-d","ips":{"127.0.0.1/32":4}}`)
	refusedWith(shop, "from this address across the cluster")
}

// Operators ask every edge at once; an edge answers only what a valid
// question asks.
func TestOperatorQuery(t *testing.T) {
	g, _, shop := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pushclient.Dial(ctx, pushclient.Options{Edge: g.URL, Topic: "orders", Transport: "sse", Header: http.Header{"X-Api-Key": {shop}}, Device: "d1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
		t.Fatalf("%+v %v", ev, err)
	}
	ask := func(q string) push.Answer {
		t.Helper()
		m, err := g.Conn.Request(bus.PushQuerySubject, []byte(q), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var a push.Answer
		if err := json.Unmarshal(m.Data, &a); err != nil || a.Edge == "" {
			t.Fatalf("%s %v", m.Data, err)
		}
		return a
	}
	if a := ask(`{"op":"connections","app":"shop"}`); a.Total != 1 || len(a.Connections) != 1 || a.Connections[0].Device != "d1" {
		t.Errorf("connections: %+v", a)
	}
	if a := ask(`{"op":"stats"}`); a.Stats == nil || a.Stats.Connections != 1 {
		t.Errorf("stats: %+v", a)
	}
	for _, q := range []string{`{`, `{"op":"kick"}`, `{"op":"kick","app":"a b"}`, `{"op":"drop"}`, `{"op":"kick","app":"shop","topc":"orders"}`} {
		if a := ask(q); a.Error == "" || a.Kicked != 0 {
			t.Errorf("%s: %+v", q, a)
		}
	}
	if a := ask(`{"op":"kick","app":"shop"}`); a.Kicked != 1 {
		t.Errorf("kick: %+v", a)
	}
	if ev, err := c.Next(ctx); err != nil || ev.Type != "close" || !strings.Contains(ev.Reason, "operator") {
		t.Errorf("after the kick: %+v %v", ev, err)
	}
}
