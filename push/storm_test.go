package push_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/push"
	"github.com/jetway-gw/jetway/push/pushclient"
)

// A reconnect storm — 2,000 clients of an edge that went away, all back
// at once with their cursors — is paced (503 OVERLOADED with Retry-After
// past the connect rate), every client resumes and gets what was
// published meanwhile, in order, and the stream's consumers stay one per
// topic per edge, not one per client.
func TestReconnectStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 connections")
	}
	const clients = 2000
	// 400 a second, one app's share 200: paced even where connections are
	// slow to make (the race detector).
	g := jetwaytest.StartWith(t, jetwaytest.Options{Push: push.Options{ConnectRate: 400, MaxConnsPerIP: clients + 10}})
	g.PutTopic(topic)
	pub, shop := g.PutKeyedApp("pub"), g.PutKeyedApp("shop")
	before := publish(t, g, pub, "", "before")
	var during []string
	for i := range 3 {
		during = append(during, publish(t, g, pub, "", fmt.Sprint("during", i)))
	}
	js, _ := jetstream.New(g.Conn)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var refused, retryAfter atomic.Int64
	errs := make(chan error, clients)
	conns := make(chan *pushclient.Conn, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := pushclient.Dial(ctx, pushclient.Options{Edge: g.URL, Topic: "orders", Transport: "ws", Header: http.Header{"X-Api-Key": {shop}}, Device: fmt.Sprint("d", i), After: before})
				var he *pushclient.HTTPError
				if errors.As(err, &he) && he.Status == 503 && he.Code == "OVERLOADED" {
					refused.Add(1)
					if he.RetryAfter > 0 {
						retryAfter.Add(1)
					}
					time.Sleep(time.Duration(100+rand.IntN(900)) * time.Millisecond)
					continue
				}
				if err != nil {
					errs <- fmt.Errorf("client %d: %w", i, err)
					return
				}
				conns <- c
				for _, want := range during {
					ev, err := c.Next(ctx)
					for err == nil && ev.Type == "ready" {
						ev, err = c.Next(ctx)
					}
					if err != nil || ev.Type != "message" || ev.Cursor != want {
						errs <- fmt.Errorf("client %d: %+v %v, want %s", i, ev, err, want)
						return
					}
				}
				return
			}
		}()
	}
	wg.Wait()
	close(errs)
	close(conns)
	t.Cleanup(func() {
		for c := range conns {
			_ = c.Close()
		}
	})
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Fatalf("%d of %d clients did not resume", n, clients)
	}
	if refused.Load() == 0 || retryAfter.Load() != refused.Load() {
		t.Errorf("the storm was not paced: %d refusals, %d with Retry-After", refused.Load(), retryAfter.Load())
	}
	st, err := js.Stream(ctx, bus.PushDurable.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().State.Consumers; c > 1 {
		t.Errorf("%d consumers on the push stream for %d clients of one edge", c, clients)
	}
	t.Logf("%d clients resumed; %d connects refused with Retry-After on the way", clients, refused.Load())
}
