package workers

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/backend"
	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

type callCounter struct{ n atomic.Int64 }

func (c *callCounter) Build(*registry.Backend, backend.BuildOptions) (backend.Instance, error) {
	return c, nil
}

func (c *callCounter) Call(context.Context, *backend.Request) (*backend.Response, error) {
	c.n.Add(1)
	return &backend.Response{Status: http.StatusOK, Header: http.Header{}, Body: []byte("ok")}, nil
}

func (c *callCounter) Close() error { return nil }

// A worker serves requests in its own wire version and the previous one
// (its replies, in the request's version, say none); a request in a version
// it does not read is answered WIRE_VERSION at once and never reaches the
// backend. WireRequests counts them all, by version.
func TestWorkerWireVersions(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	w, err := New(Options{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Shutdown(context.Background()) }()
	be := &callCounter{}
	w.adapters[registry.BackendHTTP] = be
	w.Apply(lifecycleSnapshot(t, "http://one/{x}", "5s"))
	client := natstest.Connect(t, s)

	ask := func(wire []string) *nats.Msg {
		t.Helper()
		m := nats.NewMsg(bus.APISubject("p", "life"))
		m.Header.Set(bus.HdrPath, "/a")
		m.Header.Set(bus.HdrRequestID, "r1")
		if wire != nil {
			m.Header[bus.HdrWire] = wire
		}
		r, err := client.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := ask(nil); string(r.Data) != "ok" || r.Header[bus.HdrWire] != nil {
		t.Errorf("a version 1 request: %q, reply headers %v", r.Data, r.Header)
	}
	if r := ask([]string{"2"}); string(r.Data) != "ok" || r.Header[bus.HdrWire] != nil {
		t.Errorf("a version 2 request: %q, reply headers %v", r.Data, r.Header)
	}
	for _, bad := range [][]string{{"3"}, {"x"}} {
		r := ask(bad)
		rep, err := bus.DecodeReply(r.Header)
		if err != nil || rep.Code != bus.CodeWireVersion || rep.Status != http.StatusBadGateway {
			t.Errorf("a request in version %q: %+v %v %s", bad, rep, err, r.Data)
		}
	}
	if n := be.n.Load(); n != 2 {
		t.Errorf("the backend was called %d times, want 2", n)
	}
	if r := ask([]string{"3"}); r.Header.Get(bus.HdrWireReads) != "1-2" {
		t.Errorf("a refusal says the worker reads %q", r.Header.Get(bus.HdrWireReads))
	}
	if got := w.WireRequests(); got["1"] != 1 || got["2"] != 1 || got["unread"] != 3 {
		t.Errorf("WireRequests %v", got)
	}
}
