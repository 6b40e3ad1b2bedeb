package workers_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

// A worker answers on the request's reply subject, which the sender chose,
// and NATS lets it (allow_responses) whatever the subject. A compromised
// edge (or a worker of any pool: both may request any API) that names a
// control subject as the reply has the answer — a backend's body, which
// for an echoing API the sender writes — published there by an honest
// worker: a breaker event of any pool, which its workers apply. A worker
// must answer only on an inbox.
func TestWorkerAnswersOnlyOnAnInbox(t *testing.T) {
	opts := natstest.DefaultOptions(t)
	opts.Users = []*server.User{
		{Username: bus.UserAdmin, Password: "a"},
		{Username: bus.UserEdge, Password: "e", Permissions: bus.RolePermissions(bus.UserEdge)},
		{Username: "worker-orders", Password: "wo", Permissions: bus.RolePermissions(bus.UserWorker, "orders")},
	}
	s := natstest.RunServerWithOptions(t, opts)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	admin := natstest.Connect(t, s, nats.UserInfo(bus.UserAdmin, "a"))
	client, err := registry.NewClient(ctx, admin, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(w, r.Body) // e.g. an API that returns what it stored
	}))
	defer echo.Close()
	a, err := client.Put(ctx, []byte(`{"name":"orders.echo","pool":"orders","route":{"method":"POST","path":"/echo"},"backend":{"type":"http","url":"`+echo.URL+`"}}`))
	if err != nil {
		t.Fatal(err)
	}

	wc := natstest.Connect(t, s, nats.UserInfo("worker-orders", "wo"), nats.CustomInboxPrefix(bus.InboxPrefix(bus.UserWorker, "orders")))
	w, err := workers.New(workers.Options{Conn: wc, Pools: []string{"orders"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Shutdown(context.Background()) }()
	rw := registry.NewWatcher(registry.WatcherOptions{Conn: wc, Buckets: []string{bus.BucketAPIs, bus.BucketFlags}})
	rw.OnChange(w.Apply)
	go func() { _ = rw.Run(ctx) }()
	natstest.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if rev, ok := w.Serving(a.Name); !ok || rev != a.Revision {
			return io.ErrNoProgress
		}
		return nil
	})
	_ = wc.Flush()

	heard := make(chan *nats.Msg, 4)
	if _, err := admin.Subscribe(bus.BreakerPrefix+">", func(m *nats.Msg) { heard <- m }); err != nil {
		t.Fatal(err)
	}
	_ = admin.Flush()

	edge := natstest.Connect(t, s, nats.UserInfo(bus.UserEdge, "e"), nats.CustomInboxPrefix(bus.InboxPrefixEdge))
	forged := []byte(`{"api":"pay.get","node":"x","from":"closed","to":"open","open_until":"2999-01-01T00:00:00Z","gen":99999}`)
	for _, reply := range []string{bus.BreakerSubject("orders", "orders.echo"), bus.BreakerSubject("pay", "pay.get")} {
		m := nats.NewMsg(bus.APISubject("orders", "orders.echo"))
		m.Reply = reply
		m.Data = forged
		m.Header.Set(bus.HdrMethod, "POST")
		m.Header.Set(bus.HdrPath, "/echo")
		if err := edge.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	// Asked on its own inbox, the worker answers as ever.
	m := nats.NewMsg(bus.APISubject("orders", "orders.echo"))
	m.Data = []byte("hi")
	m.Header.Set(bus.HdrMethod, "POST")
	m.Header.Set(bus.HdrPath, "/echo")
	if r, err := edge.RequestMsg(m, 5*time.Second); err != nil || string(r.Data) != "hi" {
		t.Fatalf("request on the edge's inbox: %v %v", r, err)
	}
	timeout := time.After(time.Second)
	for {
		select {
		case m := <-heard:
			t.Errorf("a worker answered onto %s: %s", m.Subject, m.Data)
		case <-timeout:
			return
		}
	}
}
