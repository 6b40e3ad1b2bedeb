package workers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/backend"
	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

// countingAdapter stands for an adapter that opens something at Build (a
// gRPC connection pool): it counts builds and closes, answers with the URL
// it was built for, and fails the test if a call reaches a closed
// instance. A call to /slow waits until release is closed.
type countingAdapter struct {
	t       *testing.T
	release chan struct{}
	entered chan struct{} // a /slow call has started

	mu     sync.Mutex
	builds []string
	closed map[string]bool
}

type countingInstance struct {
	a      *countingAdapter
	url    string
	mu     sync.Mutex
	closed bool
}

func (a *countingAdapter) Build(spec *registry.Backend, _ backend.BuildOptions) (backend.Instance, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.builds = append(a.builds, spec.URL)
	if strings.Contains(spec.URL, "fail") {
		return nil, errors.New("cannot connect")
	}
	return &countingInstance{a: a, url: spec.URL}, nil
}

func (in *countingInstance) Call(_ context.Context, req *backend.Request) (*backend.Response, error) {
	if req.Path == "/slow" {
		in.a.entered <- struct{}{}
		<-in.a.release
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		in.a.t.Errorf("a call reached the closed instance of %s", in.url)
	}
	return &backend.Response{Status: http.StatusOK, Header: http.Header{}, Body: []byte(in.url)}, nil
}

func (in *countingInstance) Close() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		in.a.t.Errorf("instance of %s closed twice", in.url)
	}
	in.closed = true
	in.a.mu.Lock()
	in.a.closed[in.url] = true
	in.a.mu.Unlock()
	return nil
}

func (a *countingAdapter) state() (builds []string, closed map[string]bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	closed = map[string]bool{}
	for k, v := range a.closed {
		closed[k] = v
	}
	return append([]string(nil), a.builds...), closed
}

func lifecycleSnapshot(t *testing.T, url, timeout string) *registry.Snapshot {
	t.Helper()
	a, err := registry.ParseAPI("life", fmt.Appendf(nil, `{"name":"life","pool":"p","route":{"path":"/{x}"},"backend":{"type":"http","url":%q},"timeout":%q}`, url, timeout))
	if err != nil {
		t.Fatal(err)
	}
	return &registry.Snapshot{APIs: map[string]*registry.API{a.Name: a}}
}

func call(t *testing.T, nc *nats.Conn, path string) (string, bus.Reply) {
	t.Helper()
	m := nats.NewMsg(bus.APISubject("p", "life"))
	m.Header.Set(bus.HdrMethod, http.MethodGet)
	m.Header.Set(bus.HdrPath, path)
	r, err := nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatalf("calling %s: %v", path, err)
	}
	rep, _ := bus.DecodeReply(r.Header)
	return string(r.Data), rep
}

// An API's backend instance is built once per backend spec: a registry
// change elsewhere in the entry keeps it (and its connections); a new spec
// builds a new one and closes the old one only after the call in flight on
// it has answered; the API leaving the worker closes the last one. A
// failed build answers BAD_GATEWAY and is tried again at the next change.
func TestBackendInstanceLifecycle(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	w, err := New(Options{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Shutdown(context.Background()) }()
	ad := &countingAdapter{t: t, release: make(chan struct{}), entered: make(chan struct{}, 1), closed: map[string]bool{}}
	w.adapters[registry.BackendHTTP] = ad
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(ad.release) }) }
	defer unblock() // before Shutdown, which waits for the call in flight
	client := natstest.Connect(t, s)

	w.Apply(lifecycleSnapshot(t, "http://one/{x}", "5s"))
	if body, _ := call(t, client, "/a"); body != "http://one/{x}" {
		t.Fatalf("first call answered %q", body)
	}
	w.Apply(lifecycleSnapshot(t, "http://one/{x}", "4s")) // same backend spec
	if builds, closed := ad.state(); len(builds) != 1 || len(closed) != 0 {
		t.Fatalf("a change outside the backend spec rebuilt it: builds %q, closed %v", builds, closed)
	}

	slow := make(chan string, 1)
	go func() { body, _ := call(t, client, "/slow"); slow <- body }()
	<-ad.entered
	w.Apply(lifecycleSnapshot(t, "http://two/{x}", "4s"))
	if body, _ := call(t, client, "/a"); body != "http://two/{x}" {
		t.Fatalf("after the change a call answered %q", body)
	}
	if _, closed := ad.state(); closed["http://one/{x}"] {
		t.Fatal("the replaced instance was closed with a call in flight")
	}
	unblock()
	if body := <-slow; body != "http://one/{x}" {
		t.Fatalf("the call in flight answered %q", body)
	}
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if _, closed := ad.state(); !closed["http://one/{x}"] || closed["http://two/{x}"] {
			return fmt.Errorf("closed %v, want only the first", closed)
		}
		return nil
	})

	w.Apply(lifecycleSnapshot(t, "http://fail/{x}", "4s"))
	if _, rep := call(t, client, "/a"); rep.Code != bus.CodeBadGateway {
		t.Fatalf("a call to a backend that failed to build got %+v", rep)
	}
	w.Apply(lifecycleSnapshot(t, "http://fail/{x}", "3s"))
	if builds, _ := ad.state(); len(builds) != 4 {
		t.Fatalf("a failed build was not tried again: builds %q", builds)
	}

	w.Apply(lifecycleSnapshot(t, "http://three/{x}", "4s"))
	w.Apply(&registry.Snapshot{})
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if _, closed := ad.state(); !closed["http://two/{x}"] || !closed["http://three/{x}"] {
			return fmt.Errorf("closed %v after the api left the worker", closed)
		}
		return nil
	})
}

// Every backend type the registry admits has an adapter in the worker.
func TestEveryBackendKindHasAnAdapter(t *testing.T) {
	ads := adapters(nil, 1<<20)
	for _, k := range registry.BackendKinds() {
		if ads[k] == nil {
			t.Errorf("backend type %q has no adapter", k)
		}
	}
	if len(ads) != len(registry.BackendKinds()) {
		t.Errorf("adapters for %d types, the registry has %d", len(ads), len(registry.BackendKinds()))
	}
}

// runners counts the goroutines in runCalls.
func runners() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "workers.(*Worker).runCalls(")
}

// Calls one after the other are served by the same goroutine (a fresh one
// per call grows its stack on every call), and the runners end when the
// worker shuts down.
func TestCallGoroutinesReusedAndEndAtShutdown(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	w, err := New(Options{Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	w.adapters[registry.BackendHTTP] = &countingAdapter{t: t, closed: map[string]bool{}}
	client := natstest.Connect(t, s)
	w.Apply(lifecycleSnapshot(t, "http://one/{x}", "5s"))
	before := runners()
	for i := range 20 {
		if body, _ := call(t, client, "/a"); body != "http://one/{x}" {
			t.Fatalf("call %d answered %q", i, body)
		}
	}
	// A call that comes before the last runner is back waiting starts
	// another, so a loaded machine may see a few; one per call is what
	// reuse rules out.
	if n := w.spawned.Load(); n < 1 || n > 4 {
		t.Fatalf("%d runner goroutines started for 20 calls in a row, want 1 (a few on a loaded machine)", n)
	}
	if err := w.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 2*time.Second, 5*time.Millisecond, func() error {
		if n := runners() - before; n > 0 { // other tests' workers may keep theirs
			return fmt.Errorf("%d runner goroutines left after shutdown", n)
		}
		return nil
	})
}
