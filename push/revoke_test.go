package push_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/internal/jetwaytest"
	"github.com/jetway-gw/jetway/push/pushclient"
	"github.com/jetway-gw/jetway/registry"
)

// revokeBound is how long a revocation may take to reach the connections
// of every edge here: generous against a loaded CI machine, and still far
// below anything but the registry snapshot (a connection is never
// rechecked on a timer).
const revokeBound = 3 * time.Second

// A key rotated out of an app, and the app disabled, each end that app's
// connections on every edge — over WebSocket, SSE and TCP — as the edges
// get the registry's change; the app's other connections are untouched
// by the rotation.
func TestRevocationReachesEveryEdge(t *testing.T) {
	g, _, _ := start(t)
	url2, w2, e2 := g.AddEdge(t, edgeOptions())
	tcp1, tcp2 := jetwaytest.ServeTCP(t, g.Edge), jetwaytest.ServeTCP(t, e2)
	old, oldRec, err := registry.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	fresh, freshRec, err := registry.NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	app := &registry.App{ID: "shop", Status: registry.AppActive, APIs: []string{"*"}, Keys: []registry.AppKey{oldRec, freshRec}}
	g.PutApps(app)
	waitEdge2 := func(ok func(a *registry.App) bool) {
		t.Helper()
		natstestCheck(t, jetwaytest.Wait, func() error {
			if a := w2.Current().Apps["shop"]; a == nil || !ok(a) {
				return errors.New("the second edge has not the app's change")
			}
			return nil
		})
	}
	waitEdge2(func(a *registry.App) bool { return len(a.Keys) == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	type conn struct {
		name string
		c    *pushclient.Conn
	}
	dialAll := func(key string) []conn {
		t.Helper()
		var cs []conn
		for _, d := range []struct{ name, edge, transport string }{
			{"edge1 ws", g.URL, "ws"}, {"edge1 sse", g.URL, "sse"}, {"edge1 tcp", tcp1, "tcp"},
			{"edge2 ws", url2, "ws"}, {"edge2 sse", url2, "sse"}, {"edge2 tcp", tcp2, "tcp"},
		} {
			c, err := pushclient.Dial(ctx, pushclient.Options{Edge: d.edge, Topic: "orders", Transport: d.transport, Header: http.Header{"X-Api-Key": {key}}})
			if err != nil {
				t.Fatalf("%s: %v", d.name, err)
			}
			t.Cleanup(func() { c.Close() })
			if ev, err := c.Next(ctx); err != nil || ev.Type != "ready" {
				t.Fatalf("%s: %+v %v", d.name, ev, err)
			}
			cs = append(cs, conn{d.name, c})
		}
		return cs
	}
	// ended waits for each connection's end and returns how long after
	// since it came, failing for one that ends otherwise than revoked.
	ended := func(cs []conn, since time.Time, why string) time.Duration {
		t.Helper()
		type end struct {
			name string
			took time.Duration
			err  error
		}
		ends := make(chan end, len(cs))
		for _, c := range cs {
			go func() {
				for {
					ev, err := c.c.Next(ctx)
					switch {
					case ev.Type == "close" && strings.Contains(ev.Reason, why): // SSE's end
						ends <- end{c.name, time.Since(since), nil}
						return
					case err != nil:
						var ce *pushclient.CloseError
						if !errors.As(err, &ce) || ce.Code != 4001 || !strings.Contains(ce.Reason, why) {
							ends <- end{c.name, 0, err}
							return
						}
						ends <- end{c.name, time.Since(since), nil}
						return
					case ev.Type == "message" || ev.Type == "gap":
						ends <- end{c.name, 0, errors.New("got " + ev.Type)}
						return
					}
				}
			}()
		}
		var slowest time.Duration
		for range cs {
			e := <-ends
			if e.err != nil {
				t.Errorf("%s: not ended as %q: %v", e.name, why, e.err)
				continue
			}
			if e.took > revokeBound {
				t.Errorf("%s: ended %v after the change, past %v", e.name, e.took, revokeBound)
			}
			slowest = max(slowest, e.took)
		}
		return slowest
	}

	// The old key is rotated out: its connections end on both edges; the
	// fresh key's stay.
	byOld, byFresh := dialAll(old), dialAll(fresh)
	t0 := time.Now()
	rotated := *app
	rotated.Keys = []registry.AppKey{freshRec}
	if _, err := g.Client.PutApp(ctx, &rotated); err != nil {
		t.Fatal(err)
	}
	took := ended(byOld, t0, "revoked")
	t.Logf("key rotated out: every connection of it on two edges ended within %v", took)
	natstestCheck(t, 5*time.Second, func() error {
		if n := len(g.Push.Connections("shop", 0)); n != 3 {
			return fmt.Errorf("edge 1 has %d connections, want the fresh key's 3", n)
		}
		return nil
	})
	waitEdge2(func(a *registry.App) bool { return len(a.Keys) == 1 })

	// The app is disabled: the rest end on both edges.
	t0 = time.Now()
	off := rotated
	off.Status = registry.AppDisabled
	if _, err := g.Client.PutApp(ctx, &off); err != nil {
		t.Fatal(err)
	}
	took = ended(byFresh, t0, "disabled")
	t.Logf("app disabled: every connection of it on two edges ended within %v", took)
	// And the disabled app is refused a new one.
	if _, err := pushclient.Dial(ctx, pushclient.Options{Edge: url2, Topic: "orders", Transport: "ws", Header: http.Header{"X-Api-Key": {fresh}}}); err == nil {
		t.Error("a disabled app connected")
	}
}
