package workers

import (
	"context"
	"log/slog"
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

// A retry that finds no time left for another attempt returns the last
// outcome, and that response must still be whole: the caller sends its body
// and then releases it. Released here first, an HTTP backend's body would be
// a pooled fasthttp buffer another call may be filling (its bytes sent to
// the wrong caller), and the caller's own release would put the same
// fasthttp.Response in the pool twice.
func TestRetryOutOfTimeReturnsAnUnreleasedResponse(t *testing.T) {
	a, err := registry.ParseAPI("rr", []byte(`{"name":"rr","pool":"p","route":{"path":"/x"},
		"backend":{"type":"http","url":"http://127.0.0.1:1/"},"timeout":"2s",
		"retry":{"attempts":3,"on":["5xx"],"min_attempt":"200ms","backoff":"1ms","max_backoff":"2ms"}}`))
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{log: slog.Default()}
	mw := w.retry(a, &governance{})
	if mw == nil {
		t.Fatal("no retry middleware")
	}
	var released, calls atomic.Int64
	next := func(ctx context.Context, _ *backend.Request) (*backend.Response, error) {
		calls.Add(1)
		// Answer 500 when less than min_attempt is left: no next attempt fits.
		dl, _ := ctx.Deadline()
		time.Sleep(time.Until(dl) - 100*time.Millisecond)
		return &backend.Response{Status: http.StatusInternalServerError, Header: http.Header{},
			Body: []byte("failed"), Release: func() { released.Add(1) }}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	resp, err := mw(next)(ctx, &backend.Request{API: a, Method: http.MethodGet, Header: http.Header{}})
	if err != nil || resp == nil || resp.Status != http.StatusInternalServerError {
		t.Fatalf("got %+v, %v; want the 500 of the only attempt", resp, err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d attempts, want 1 (no time for a second)", n)
	}
	if n := released.Load(); n != 0 {
		t.Fatalf("the response returned to the caller was released %d times already", n)
	}
	resp.Free()
	if n := released.Load(); n != 1 {
		t.Fatalf("released %d times in all, want once", n)
	}
}

// An instance built for an API whose subscription then fails is closed:
// nothing else would ever retire it (the API is not in the worker's subs),
// and an adapter that opens connections at Build would leak them.
func TestInstanceOfAFailedSubscriptionIsClosed(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	w, err := New(Options{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	ad := &countingAdapter{t: t, release: make(chan struct{}), entered: make(chan struct{}, 1), closed: map[string]bool{}}
	w.adapters[registry.BackendHTTP] = ad
	nc.Close() // every subscription now fails
	w.Apply(lifecycleSnapshot(t, "http://one/{x}", "5s"))
	if got := w.Subscribed(); len(got) != 0 {
		t.Fatalf("subscribed %v on a closed connection", got)
	}
	if builds, closed := ad.state(); len(builds) != 1 || !closed["http://one/{x}"] {
		t.Fatalf("builds %q, closed %v: the instance of the unsubscribed api was left open", builds, closed)
	}
}

// A backend that panics while the breaker is half-open still ends its
// probe: counted as a failure, the circuit opens again and probes again
// later. Left out, the probe stays out for ever and, once all of them have
// panicked, the circuit refuses every call until the policy changes.
func TestBreakerProbeEndsWhenTheBackendPanics(t *testing.T) {
	s := natstest.RunServer(t)
	w, err := New(Options{Conn: natstest.Connect(t, s)})
	if err != nil {
		t.Fatal(err)
	}
	a, err := registry.ParseAPI("bp", []byte(`{"name":"bp","pool":"p","route":{"path":"/x"},
		"backend":{"type":"http","url":"http://127.0.0.1:1/"},
		"breaker":{"consecutive_failures":1,"open_for":"100ms","max_open_for":"200ms","half_open_probes":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	mw := w.breaker(a, &governance{})
	var panics atomic.Bool
	b := mw(func(context.Context, *backend.Request) (*backend.Response, error) {
		if panics.Load() {
			panic("backend bug")
		}
		return &backend.Response{Status: http.StatusInternalServerError, Header: http.Header{}}, nil
	})
	call := func() (err error, panicked bool) {
		defer func() {
			if recover() != nil {
				panicked = true
			}
		}()
		_, err = b(context.Background(), &backend.Request{API: a, Method: http.MethodGet, Header: http.Header{}})
		return err, false
	}
	call() // one failure opens the circuit
	if err, _ := call(); err == nil {
		t.Fatal("the circuit did not open")
	}
	time.Sleep(150 * time.Millisecond) // half-open: one probe
	panics.Store(true)
	if _, panicked := call(); !panicked {
		t.Fatal("the probe did not reach the backend")
	}
	panics.Store(false)
	time.Sleep(300 * time.Millisecond) // past the longest open period
	if err, _ := call(); err != nil {
		t.Fatalf("after a probe that panicked, the circuit refuses: %v", err)
	}
}

// releasePanics is an adapter whose responses panic when released, after
// the reply has gone out.
type releasePanics struct{}

func (releasePanics) Build(*registry.Backend, backend.BuildOptions) (backend.Instance, error) {
	return backend.Func(func(context.Context, *backend.Request) (*backend.Response, error) {
		return &backend.Response{Status: 200, Body: []byte("ok"), Release: func() { panic("release bug") }}, nil
	}), nil
}

// A panic after the reply was sent is logged, and no second (error) reply
// follows the first.
func TestPanicAfterTheReplySendsNoSecondReply(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	w, err := New(Options{Conn: natstest.Connect(t, s)})
	if err != nil {
		t.Fatal(err)
	}
	w.adapters[registry.BackendHTTP] = releasePanics{}
	w.Apply(lifecycleSnapshot(t, "http://one/{x}", "5s"))
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(bus.APISubject("p", "life"))
	m.Reply = inbox
	m.Header.Set(bus.HdrPath, "/a")
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	first, err := sub.NextMsg(5 * time.Second)
	if err != nil || string(first.Data) != "ok" {
		t.Fatalf("first reply %v %v", first, err)
	}
	if second, err := sub.NextMsg(300 * time.Millisecond); err == nil {
		t.Fatalf("a second reply followed the first: %s %q", second.Header, second.Data)
	}
}
