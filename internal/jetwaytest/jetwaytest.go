// Package jetwaytest runs a whole Jetway gateway inside a test, in the style
// of nats-server's test helpers: a real in-process nats-server with
// JetStream (bus/natstest), an edge behind a real HTTP server, one or more
// workers, and a registry client — each on its own NATS connection and
// registry watcher, as in `jetway serve`. Everything is stopped by
// t.Cleanup. Nothing is mocked: tests point APIs at real httptest backends
// and call the edge over HTTP.
//
//	g := jetwaytest.Start(t)            // edge + a worker of every pool
//	g.Publish(`{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"mock","body":"hi"}}`)
//	r := g.Do("GET", "/a", nil)         // r.Status, r.Header, r.Body, r.Code
//
// It is for tests only (it imports edge and workers, so no package below
// them may import it outside its _test.go files).
package jetwaytest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/otel"
	"github.com/jetway-gw/jetway/push"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

// Wait is how long the helpers wait for the edge and the workers to apply
// a registry change before they fail the test.
const Wait = 3 * time.Second

// Options configure Start. The zero value is an edge with metrics and one
// worker of every pool.
type Options struct {
	// Edge options of the first edge; Conn and Metrics are filled in
	// (Metrics only when nil).
	Edge edge.Options
	// Worker options of the first worker; Conn is filled in. Its Pools
	// empty means every pool.
	Worker workers.Options
	// Push options of the first edge's push server; Conn is filled in.
	Push push.Options
}

// Gateway is a running gateway: the first edge (URL, EdgeWatcher, Edge,
// Metrics), the first worker (Worker), and an admin connection (Conn,
// Client) to the same nats-server. Its methods fail the test on error; Do
// may be called from any goroutine, the others from the test's only.
type Gateway struct {
	T testing.TB
	// Server is the nats-server; Conn an admin connection to it.
	Server *server.Server
	Conn   *nats.Conn
	// Client writes the registry (APIs, apps, switches).
	Client *registry.Client
	// URL is the first edge's HTTP address (http://127.0.0.1:port).
	URL         string
	Edge        *edge.Edge
	EdgeWatcher *registry.Watcher
	// Push is the first edge's push server.
	Push    *push.Server
	Metrics *otel.Metrics
	// Worker is the first worker.
	Worker *workers.Worker

	ctx     context.Context
	workers []startedWorker
}

type startedWorker struct {
	w     *workers.Worker
	pools []string
}

// Start runs a nats-server, an edge and a worker of pools (none: every
// pool) and waits until the edge has loaded the registry.
func Start(t testing.TB, pools ...string) *Gateway {
	t.Helper()
	return StartWith(t, Options{Worker: workers.Options{Pools: pools}})
}

// StartWith is Start with options.
func StartWith(t testing.TB, o Options) *Gateway {
	t.Helper()
	s := natstest.RunServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	g := &Gateway{T: t, Server: s, Conn: natstest.Connect(t, s), ctx: ctx}
	var err error
	if g.Client, err = registry.NewClient(ctx, g.Conn, registry.BucketOptions{}); err != nil {
		t.Fatal(err)
	}
	eo := o.Edge
	if eo.Metrics == nil {
		eo.Metrics = otel.NewMetrics("test-edge", "edge")
	}
	g.Metrics = eo.Metrics
	eo.Conn = natstest.Connect(t, s, nats.CustomInboxPrefix(bus.InboxPrefixEdge))
	closePush := addPush(t, &eo, o.Push)
	e, err := edge.New(eo)
	if err != nil {
		t.Fatal(err)
	}
	g.Edge, g.Push = e, eo.Push
	g.EdgeWatcher = registry.NewWatcher(registry.WatcherOptions{Conn: natstest.Connect(t, s)})
	g.EdgeWatcher.OnChange(e.Apply)
	g.Worker = g.AddWorkerWith(o.Worker)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = g.EdgeWatcher.Run(ctx) }()
	go func() { defer wg.Done(); _ = e.Run(ctx) }()
	srv := httptest.NewServer(e)
	g.URL = srv.URL
	t.Cleanup(func() { closePush(); srv.Close(); cancel(); wg.Wait() })
	if err := g.EdgeWatcher.WaitLive(ctx); err != nil {
		t.Fatal(err)
	}
	return g
}

// AddWorker starts one more worker of pools (none: every pool), with its
// own connection and registry watcher. Publish waits for it too.
func (g *Gateway) AddWorker(pools ...string) *workers.Worker {
	g.T.Helper()
	return g.AddWorkerWith(workers.Options{Pools: pools})
}

// AddWorkerWith is AddWorker with options; Conn is filled in.
func (g *Gateway) AddWorkerWith(o workers.Options) *workers.Worker {
	g.T.Helper()
	// The inbox prefix of the worker role, as `jetway worker` connects
	// (bus.InboxPrefix): a stream's acks come back under it.
	nc, err := nats.Connect(g.Server.ClientURL(), nats.CustomInboxPrefix(bus.InboxPrefix(bus.UserWorker, o.Pools...)))
	if err != nil {
		g.T.Fatal(err)
	}
	g.T.Cleanup(nc.Close)
	o.Conn = nc
	w, err := workers.New(o)
	if err != nil {
		g.T.Fatal(err)
	}
	rw := registry.NewWatcher(registry.WatcherOptions{Conn: nc})
	rw.OnChange(w.Apply)
	go func() { _ = rw.Run(g.ctx) }()
	g.workers = append(g.workers, startedWorker{w: w, pools: slices.Clone(o.Pools)})
	return w
}

// AddEdge starts one more edge on the gateway's nats-server, with its own
// connection and watcher, behind its own HTTP server, and waits until it
// has loaded the registry. eo.Conn is filled in; Metrics is left as given.
// Stopped by t's cleanup (t may be a subtest of the gateway's test).
func (g *Gateway) AddEdge(t testing.TB, eo edge.Options) (url string, w *registry.Watcher, e *edge.Edge) {
	t.Helper()
	nc, err := nats.Connect(g.Server.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	eo.Conn = nc
	closePush := addPush(t, &eo, push.Options{})
	e, err = edge.New(eo)
	if err != nil {
		t.Fatal(err)
	}
	w = registry.NewWatcher(registry.WatcherOptions{Conn: nc})
	w.OnChange(e.Apply)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = w.Run(ctx) }()
	go func() { defer wg.Done(); _ = e.Run(ctx) }()
	srv := httptest.NewServer(e)
	t.Cleanup(func() { closePush(); srv.Close(); cancel(); wg.Wait() })
	if err := w.WaitLive(ctx); err != nil {
		t.Fatal(err)
	}
	return srv.URL, w, e
}

// addPush gives an edge's options a push server on its connection, unless
// they have one; the function returned closes it (its subscribers end, so
// the HTTP server can close).
func addPush(t testing.TB, eo *edge.Options, po push.Options) func() {
	if eo.Push != nil {
		return func() {}
	}
	po.Conn = eo.Conn
	p, err := push.New(po)
	if err != nil {
		t.Fatal(err)
	}
	eo.Push = p
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	}
}

// PutTopic stores a push topic and waits until the first edge has it.
func (g *Gateway) PutTopic(doc string) *registry.Topic {
	g.T.Helper()
	tp, err := g.Client.PutTopic(context.Background(), []byte(doc))
	if err != nil {
		g.T.Fatalf("putting a topic: %v", err)
	}
	natstest.CheckFor(g.T, Wait, 2*time.Millisecond, func() error {
		if got := g.EdgeWatcher.Current().Topics[tp.Name]; got == nil || got.Revision != tp.Revision {
			return fmt.Errorf("edge has not applied topic %s@%d", tp.Name, tp.Revision)
		}
		return nil
	})
	return tp
}

// Publish puts an API entry through the registry client (which refuses a
// route conflict: see PutRaw) and waits until the first edge and every
// worker of the API's pool serve its new revision. An API of a pool no
// worker serves is waited for at the edge only.
func (g *Gateway) Publish(doc string) *registry.API {
	g.T.Helper()
	a, err := g.Client.Put(context.Background(), []byte(doc))
	if err != nil {
		g.T.Fatalf("publishing: %v", err)
	}
	natstest.CheckFor(g.T, Wait, 2*time.Millisecond, func() error {
		if got := g.EdgeWatcher.Current().APIs[a.Name]; got == nil || got.Revision != a.Revision {
			return fmt.Errorf("edge has not applied %s@%d", a.Name, a.Revision)
		}
		for i, sw := range g.workers {
			if len(sw.pools) > 0 && !slices.Contains(sw.pools, a.Pool) {
				continue
			}
			if rev, ok := sw.w.Serving(a.Name); !ok || rev != a.Revision {
				return fmt.Errorf("worker %d not serving %s@%d", i, a.Name, a.Revision)
			}
		}
		return nil
	})
	// The workers' subscriptions must have reached the server.
	if err := g.Conn.Flush(); err != nil {
		g.T.Fatal(err)
	}
	return a
}

// PublishDraft puts a draft (registry.Client.PutDraft) and waits until the
// first edge has it and the first worker serves it ("<name>@draft").
func (g *Gateway) PublishDraft(doc string) *registry.API {
	g.T.Helper()
	a, err := g.Client.PutDraft(context.Background(), []byte(doc))
	if err != nil {
		g.T.Fatalf("publishing a draft: %v", err)
	}
	natstest.CheckFor(g.T, Wait, 2*time.Millisecond, func() error {
		if got := g.EdgeWatcher.Current().Drafts[a.Name]; got == nil || got.Revision != a.Revision {
			return fmt.Errorf("edge has not applied the draft %s@%d", a.Name, a.Revision)
		}
		return nil
	})
	g.WaitServing(a.Key(), a.Revision)
	if err := g.Conn.Flush(); err != nil {
		g.T.Fatal(err)
	}
	return a
}

// WaitDrafts waits until the first edge has a draft of each named API
// and the first worker serves it at the edge's revision: for drafts
// written by other means than PublishDraft (an importer, say).
func (g *Gateway) WaitDrafts(names ...string) {
	g.T.Helper()
	natstest.CheckFor(g.T, Wait, 2*time.Millisecond, func() error {
		for _, n := range names {
			d := g.EdgeWatcher.Current().Drafts[n]
			if d == nil {
				return fmt.Errorf("edge has no draft of %s", n)
			}
			if rev, ok := g.Worker.Serving(d.Key()); !ok || rev != d.Revision {
				return fmt.Errorf("worker not serving %s@%d", d.Key(), d.Revision)
			}
		}
		return nil
	})
	if err := g.Conn.Flush(); err != nil {
		g.T.Fatal(err)
	}
}

// PutRaw writes an entry straight into the APIs bucket, as `nats kv put`
// would, bypassing the client's checks (a second API on a route, say), and
// waits until the first edge has it. It returns the entry's revision.
func (g *Gateway) PutRaw(name, doc string) uint64 {
	g.T.Helper()
	js, err := jetstream.New(g.Conn)
	if err != nil {
		g.T.Fatal(err)
	}
	kv, err := registry.OpenAPIs(context.Background(), js, registry.BucketOptions{})
	if err != nil {
		g.T.Fatal(err)
	}
	rev, err := kv.Put(context.Background(), name, []byte(doc))
	if err != nil {
		g.T.Fatal(err)
	}
	natstest.CheckFor(g.T, Wait, 2*time.Millisecond, func() error {
		if got := g.EdgeWatcher.Current().APIs[name]; got == nil || got.Revision != rev {
			return fmt.Errorf("edge has not applied %s@%d", name, rev)
		}
		return nil
	})
	return rev
}

// PutApps stores apps and waits until the first edge has them.
func (g *Gateway) PutApps(apps ...*registry.App) {
	g.T.Helper()
	revs := map[string]uint64{}
	for _, a := range apps {
		got, err := g.Client.PutApp(context.Background(), a)
		if err != nil {
			g.T.Fatal(err)
		}
		revs[a.ID] = got.Revision
	}
	natstest.CheckFor(g.T, Wait, 2*time.Millisecond, func() error {
		for id, rev := range revs {
			if a := g.EdgeWatcher.Current().Apps[id]; a == nil || a.Revision != rev {
				return fmt.Errorf("edge has not applied app %s@%d", id, rev)
			}
		}
		return nil
	})
}

// PutKeyedApp stores an active app granted apis (none: every API) with one
// fresh API key, waits until the edge has it, and returns the key to send
// as X-Api-Key.
func (g *Gateway) PutKeyedApp(id string, apis ...string) (key string) {
	g.T.Helper()
	key, rec, err := registry.NewAPIKey()
	if err != nil {
		g.T.Fatal(err)
	}
	if len(apis) == 0 {
		apis = []string{"*"}
	}
	g.PutApps(&registry.App{ID: id, Status: registry.AppActive, Keys: []registry.AppKey{rec}, APIs: apis})
	return key
}

// WaitServing waits until the first worker serves an API tier (API.Key,
// "name" or "name@sandbox") at revision rev.
func (g *Gateway) WaitServing(key string, rev uint64) {
	g.T.Helper()
	natstest.CheckFor(g.T, Wait, 2*time.Millisecond, func() error {
		if got, ok := g.Worker.Serving(key); !ok || got != rev {
			return fmt.Errorf("worker not serving %s@%d", key, rev)
		}
		return nil
	})
}

// Client bounds every test request: a test must fail, never hang.
var Client = &http.Client{Timeout: 20 * time.Second}

// Result is an HTTP answer, read whole.
type Result struct {
	Status int
	Header http.Header
	Body   string
	// Code is the machine code of a gateway-made error ("RATE_LIMITED"),
	// "" for a body that is not one.
	Code string
}

// Do sends a request to the first edge; hdr are header name, value pairs.
// A transport error is reported with t.Error (not Fatal: Do runs in
// goroutines too) and gives the zero Result.
func (g *Gateway) Do(method, path string, body io.Reader, hdr ...string) Result {
	g.T.Helper()
	return Do(g.T, g.URL, method, path, body, hdr...)
}

// Do is Gateway.Do against any edge's base URL.
func Do(t testing.TB, base, method, path string, body io.Reader, hdr ...string) Result {
	t.Helper()
	req, err := http.NewRequest(method, base+path, body)
	if err != nil {
		t.Error(err)
		return Result{}
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := Client.Do(req)
	if err != nil {
		t.Error(err)
		return Result{}
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s %s: reading the body: %v", method, path, err) // a body shorter than its Content-Length, say
	}
	r := Result{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
	var e struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(b, &e) == nil {
		r.Code = e.Code
	}
	return r
}

// BreakerEvents follows the breaker changes of an API, as every worker of
// its pool hears them; NextBreakerEvent takes the next one.
func (g *Gateway) BreakerEvents(api string) <-chan workers.BreakerEvent {
	g.T.Helper()
	ch := make(chan workers.BreakerEvent, 64)
	sub, err := g.Conn.Subscribe(workers.BreakerSubjectPrefix+"*."+api, func(m *nats.Msg) {
		var ev workers.BreakerEvent
		if json.Unmarshal(m.Data, &ev) == nil {
			select {
			case ch <- ev:
			default: // a test that stopped reading
			}
		}
	})
	if err != nil {
		g.T.Fatal(err)
	}
	g.T.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := g.Conn.Flush(); err != nil {
		g.T.Fatal(err)
	}
	return ch
}

// NextBreakerEvent is the next event of ch, within Wait.
func NextBreakerEvent(t testing.TB, ch <-chan workers.BreakerEvent) workers.BreakerEvent {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(Wait):
		t.Fatal("no breaker event")
		return workers.BreakerEvent{}
	}
}

// ServeTCP serves e's push TCP listener on a free local port until the
// test ends, and returns its address as pushclient dials it
// (tcp://127.0.0.1:port).
func ServeTCP(t testing.TB, e *edge.Edge) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.ServeTCP(ln) }()
	t.Cleanup(func() { _ = ln.Close() })
	return "tcp://" + ln.Addr().String()
}
