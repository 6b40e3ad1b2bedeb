package grpcbackend_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// goroutineSlack is how many more goroutines than before a call the
// process may run once the call is over: the gateway's own (the NATS
// server's, an idle worker runner) come and go.
const goroutineSlack = 3

// stalledCalls is how many stalled calls a test makes at once, so that a
// goroutine left behind by each adds up to more than the slack.
const stalledCalls = 4

// goroutines counts the process's goroutines once the test clients' idle
// connections are closed (they would count as the calls').
func goroutines() int {
	jetwaytest.Client.CloseIdleConnections()
	http.DefaultClient.CloseIdleConnections()
	return runtime.NumGoroutine()
}

// goroutinesBackTo waits until the process runs no more than base (plus
// the slack) goroutines: what the calls since started has ended. A
// worker's idle runner lives 10 s, hence the wait.
func goroutinesBackTo(t *testing.T, base int) {
	t.Helper()
	natstest.CheckFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		if n := goroutines(); n > base+goroutineSlack {
			var b bytes.Buffer
			_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
			return fmt.Errorf("%d goroutines, %d before the calls:\n%s", n, base, b.String())
		}
		return nil
	})
}

// handlerWatch is a server interceptor that records, for the method it
// watches, the time each call had left when it came in (its grpc-timeout)
// and how many handlers ended on a done context.
type handlerWatch struct {
	method string

	mu        sync.Mutex
	left      []time.Duration // < 0: no deadline
	cancelled int
}

func newHandlerWatch(method string) *handlerWatch { return &handlerWatch{method: method} }

func (w *handlerWatch) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if info.FullMethod != w.method {
		return h(srv, ss)
	}
	left := time.Duration(-1)
	if d, ok := ss.Context().Deadline(); ok {
		left = time.Until(d)
	}
	w.mu.Lock()
	w.left = append(w.left, left)
	w.mu.Unlock()
	err := h(srv, ss)
	if ss.Context().Err() != nil {
		w.mu.Lock()
		w.cancelled++
		w.mu.Unlock()
	}
	return err
}

// rearm forgets the handlers that ended cancelled so far.
func (w *handlerWatch) rearm() {
	w.mu.Lock()
	w.cancelled = 0
	w.mu.Unlock()
}

// waitCancelled waits until n handlers have ended on a done context.
func (w *handlerWatch) waitCancelled(t *testing.T, what string, n int) {
	t.Helper()
	natstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.cancelled < n {
			return fmt.Errorf("%s: %d of %d backend handlers saw their context end", what, w.cancelled, n)
		}
		return nil
	})
}

// checkDeadlines says every call came in with a deadline within the API's
// timeout: the caller's time left travels as grpc-timeout.
func (w *handlerWatch) checkDeadlines(t *testing.T, timeout time.Duration) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.left) == 0 {
		t.Fatal("no call reached the backend")
	}
	for _, left := range w.left {
		if left <= 0 || left > timeout+10*time.Millisecond {
			t.Fatalf("the backend's call had %v left, not within the API's %v timeout (all: %v)", left, timeout, w.left)
		}
	}
}

// openStream posts to path with Accept and returns the response, its
// status line and headers read.
func openStream(t *testing.T, ctx context.Context, url, accept string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(`{}`))
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := jetwaytest.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A server stream asked for as a JSON array (any Accept but NDJSON and
// SSE) is relayed like NDJSON: the caller has "[" and the first element
// while the backend's stream is still open, the elements come through the
// same window, and a caller that goes away ends the backend's call.
func TestArrayStreamRelayed(t *testing.T) {
	g := jetwaytest.Start(t)
	gs := &gatedStream{release: make(chan struct{}), cancelled: make(chan struct{})}
	addr := serveTest(t, gs, false)
	g.Publish(fmt.Sprintf(`{"name":"live","pool":"p","route":{"method":"POST","path":"/live"},"timeout":"30s",
		"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/StreamingOutputCall"}}`, addr))
	first := `{"payload":{"body":"` + base64.StdEncoding.EncodeToString([]byte("first")) + `"}}`

	for _, accept := range []string{"", "application/json"} {
		gs.release, gs.cancelled = make(chan struct{}), make(chan struct{})
		resp := openStream(t, context.Background(), g.URL+"/live", accept)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("Accept %q: %d %v", accept, resp.StatusCode, resp.Header)
		}
		// "[" and the first element, while the backend holds its stream.
		head := make([]byte, 1+len(first))
		if _, err := io.ReadFull(resp.Body, head); err != nil || string(head) != "["+first {
			t.Fatalf("Accept %q: the stream began %q (%v), want %q", accept, head, err, "["+first)
		}
		close(gs.release)
		rest, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		var all []map[string]map[string]string
		if err != nil || json.Unmarshal(append(head, rest...), &all) != nil || len(all) != 41 || all[40]["payload"]["body"] != base64.StdEncoding.EncodeToString([]byte("more")) {
			t.Fatalf("Accept %q: the whole array: %v %q", accept, err, append(head, rest...))
		}
	}

	// A caller gone after the first element, or before any, ends the
	// backend's call long before the API's 30 s.
	for _, before := range []int{1, -1} {
		gs.release, gs.cancelled, gs.before = make(chan struct{}), make(chan struct{}), before
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			req, _ := http.NewRequestWithContext(ctx, "POST", g.URL+"/live", strings.NewReader(`{}`))
			resp, err := jetwaytest.Client.Do(req)
			if err != nil {
				return
			}
			if before > 0 {
				_, _ = bufio.NewReader(resp.Body).ReadString('}')
			}
			resp.Body.Close()
			cancel()
		}()
		if before < 0 {
			time.Sleep(300 * time.Millisecond) // the call is in, the backend silent
			cancel()
		}
		select {
		case <-gs.cancelled:
		case <-time.After(10 * time.Second):
			t.Fatalf("after %d elements, the backend's stream outlived its caller", before)
		}
		cancel()
		<-done
	}
	gs.before = 0
}

// A JSON array that cannot finish ends with an element saying why, and
// "]": the backend's status after its first messages, the gateway's error
// at the deadline. An empty stream is [], and a stream is not bounded by
// the bus's max payload.
func TestArrayStreamEnds(t *testing.T) {
	g := jetwaytest.Start(t)
	addr := startGRPC(t)
	publishGRPC(g, "stream", "/stream", addr, "grpc.testing.TestService/StreamingOutputCall", "")
	// Large streams take their time (under the race detector too).
	g.Publish(fmt.Sprintf(`{"name":"large","pool":"p","route":{"method":"POST","path":"/large"},"timeout":"30s",
		"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/StreamingOutputCall"}}`, addr))
	type element struct {
		Payload struct{ Body string }
		Error   *struct {
			Code    any
			Message string
		}
	}
	array := func(path, body string) []element {
		t.Helper()
		r := g.Do("POST", path, strings.NewReader(body))
		var els []element
		if r.Status != 200 || r.Header.Get("Content-Type") != "application/json" || json.Unmarshal([]byte(r.Body), &els) != nil {
			t.Fatalf("%s: %d %v %.300q", body, r.Status, r.Header, r.Body)
		}
		return els
	}
	if els := array("/stream", `{"responseParameters":[{"size":1},{"size":1}],"responseStatus":{"code":14,"message":"gone"}}`); len(els) != 3 || els[2].Error == nil || els[2].Error.Code != float64(14) || els[2].Error.Message != "gone" {
		t.Fatalf("a status after two messages: %+v", els)
	}
	if els := array("/stream", `{"responseParameters":[{"size":1},{"size":1,"intervalUs":10000000}]}`); len(els) != 2 || els[1].Error == nil || els[1].Error.Code != "GATEWAY_TIMEOUT" {
		t.Fatalf("a stream cut at its deadline: %+v", els)
	}
	if r := g.Do("POST", "/stream", strings.NewReader(`{}`)); r.Status != 200 || r.Body != "[]" {
		t.Fatalf("an empty stream: %d %q", r.Status, r.Body)
	}
	// A message whose JSON cannot cross the bus (7 MiB, 9.3 MiB as
	// base64) ends the array with the gateway's error, not silently.
	if els := array("/large", `{"responseParameters":[{"size":1},{"size":7340032}]}`); len(els) != 2 || els[1].Error == nil || els[1].Error.Code != "BAD_GATEWAY" {
		t.Fatalf("a message over the bus's max payload: %d elements, last %+v", len(els), els[len(els)-1].Error)
	}
	// More than twice the max payload, in 256 KiB messages.
	n := int(2*g.Conn.MaxPayload()/(256<<10)) + 1
	body := `{"responseParameters":[` + strings.TrimSuffix(strings.Repeat(`{"size":262144},`, n), ",") + `]}`
	if els := array("/large", body); len(els) != n || els[n-1].Error != nil || len(els[n-1].Payload.Body) < 256<<10 {
		t.Fatalf("a stream of %d MiB: %d elements", n/4, len(els))
	}
}

// A unary method asked for a JSON array answers as before, once; so does a
// stream asked for by an edge that takes no stream (collected whole).
func TestArrayOfAUnaryMethod(t *testing.T) {
	g := jetwaytest.Start(t)
	addr := startGRPC(t)
	publishGRPC(g, "unary", "/unary", addr, "grpc.testing.TestService/UnaryCall", "")
	publishGRPC(g, "stream", "/stream", addr, "grpc.testing.TestService/StreamingOutputCall", "")
	for i := 0; i < 3; i++ { // the first, then the ones after the edge learned it answers once
		if r := g.Do("POST", "/unary", strings.NewReader(`{"responseSize":1}`)); r.Status != 200 || !strings.HasPrefix(r.Body, "{") || !strings.Contains(r.Body, `"eA=="`) {
			t.Fatalf("unary %d: %d %s", i, r.Status, r.Body)
		}
	}
	m := askWorker(t, g, "stream", `{"responseParameters":[{"size":1},{"size":2}]}`)
	var els []map[string]map[string]string
	if err := json.Unmarshal(m.Data, &els); err != nil || len(els) != 2 || els[1]["payload"]["body"] != "eHg=" {
		t.Fatalf("a stream asked for whole: %v %s", err, m.Data)
	}
}

// A caller that goes away while the backend's stream is quiet, after its
// first message, says nothing of the backend: the API's breaker does not
// count it (it counted it as a deadline run out).
func TestCallerGoneMidStreamIsNotAFailure(t *testing.T) {
	g := jetwaytest.Start(t)
	gs := &gatedStream{release: make(chan struct{}), cancelled: make(chan struct{})}
	addr := serveTest(t, gs, false)
	g.Publish(fmt.Sprintf(`{"name":"live","pool":"p","route":{"method":"POST","path":"/live"},"timeout":"30s",
		"breaker":{"consecutive_failures":1,"open_for":"1m"},
		"backend":{"type":"grpc","target":%q,"method":"grpc.testing.TestService/StreamingOutputCall"}}`, addr))
	for _, accept := range []string{"", "application/x-ndjson"} {
		gs.release, gs.cancelled = make(chan struct{}), make(chan struct{})
		resp := openStream(t, context.Background(), g.URL+"/live", accept)
		if _, err := bufio.NewReader(resp.Body).ReadString('}'); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		select {
		case <-gs.cancelled:
		case <-time.After(10 * time.Second):
			t.Fatal("the backend's stream outlived its caller")
		}
		time.Sleep(100 * time.Millisecond) // the worker records the call's end
		if st, _ := g.Worker.BreakerState("live"); st != "closed" {
			t.Fatalf("Accept %q: a caller gone mid-stream left the breaker %s", accept, st)
		}
	}
}
