// Package backend holds what a worker calls an API's backend with, whatever
// serves it: the Request and Response of one call, the Backend function and
// the Middleware that wraps it, and the Adapter of each backend type.
//
// The shapes follow lura's: a Backend is a function from request to
// response, a Middleware wraps one, and each API gets one stack built from
// its definition when the registry changes — never per request.
//
// An Adapter turns an entry's backend spec into an Instance once, when the
// spec is published or changed; whatever the instance opens (a connection
// pool, a client) lives until its Close. The worker keeps an instance while
// the spec is unchanged and closes it only after it is replaced and the
// calls in flight on it are done, so Call never runs on a closed instance.
//
// Each backend type is one folder below this one (http, mock, nats, grpc) and one line
// in the worker's table of adapters and in the registry's table of kinds.
package backend

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// Request is one call as a worker sees it: the HTTP request the edge
// received, minus hop-by-hop headers.
type Request struct {
	API       *registry.API
	Method    string
	Path      string // as received (escaped form)
	RawQuery  string
	RawParams string // route parameters, URL-query encoded
	Header    http.Header
	Body      []byte
	RequestID string
	ClientIP  string // the caller's address as the edge saw it, for policies and logs
	App       string // the authenticated app ("" for an open API)
	// Host is the Host the edge's rewrite asks for ("" for the backend's
	// own): see Request.RewrittenHost.
	Host string
	// Stream is the window of a caller that takes the answer as a stream
	// (an edge relaying NDJSON or SSE); 0: one response.
	Stream int
}

// RewrittenHost is the Host the backend gets instead of its own (""
// for its own): the one the edge asks for, which must be the one the API
// tier's entry declares (registry.API.HostRewrite) — an edge never points
// a backend at a host its entry does not name. A mismatch (an edge that
// runs ahead of or behind this worker's registry, or a forged request) is
// refused.
func (r *Request) RewrittenHost() (string, error) {
	if r.Host == "" {
		return "", nil
	}
	if r.Host != r.API.HostRewrite() {
		return "", bus.Errorf(bus.CodeBadRequest, fmt.Sprintf("api %s does not rewrite its Host to %q on this worker", r.API.Name, r.Host))
	}
	return r.Host, nil
}

// Params decodes the route parameters.
func (r *Request) Params() url.Values {
	v, _ := url.ParseQuery(r.RawParams)
	return v
}

// Response is what goes back to the edge. Release, if set, is called once
// the response has been sent (it returns pooled buffers).
type Response struct {
	Status  int
	Header  http.Header
	Body    []byte
	Release func()
	// Failed marks an answer below 500 that breakers and retries count as
	// a failure all the same: a gRPC RESOURCE_EXHAUSTED (429) is the
	// backend saying it is overloaded.
	Failed bool
	// Classified says Failed is the API's classify verdict, which alone
	// decides (a 5xx it does not list succeeds).
	Classified bool
	// RPCCode is the status code of the backend's own RPC protocol the
	// call ended with (gRPC's codes.Code; 0 is OK), for its client span.
	RPCCode int
	// Channel is the channel of a channel set that answered: the reply
	// carries it as X-Jetway-Channel (set here rather than in Header,
	// which an adapter may share between calls).
	Channel string
	// Stream, set only when the request had Stream, sends the body in
	// chunks after Status and Header went out: it calls send for each,
	// returns when the backend's stream ends (its error, if any, already
	// written as a chunk), and stops when send fails (the caller went
	// away, the deadline). Body is then empty.
	Stream func(send func(chunk []byte) error) error
}

// StreamError is what a Stream returns when the backend failed after the
// response's head went out (the error itself already sent as a chunk):
// Status is the HTTP status the error would have had as the answer, so
// that a breaker counts it as it would have counted that answer.
type StreamError struct {
	Status  int
	Message string
	RPCCode int // as Response.RPCCode
}

func (e *StreamError) Error() string {
	return fmt.Sprintf("the backend's stream failed with %d: %s", e.Status, e.Message)
}

// AfterStream makes f run when the response's Stream has returned, with
// its error: what a middleware holds for the call (a context, a span) lives
// as long as the stream. r must have a Stream.
func (r *Response) AfterStream(f func(err error)) {
	inner := r.Stream
	r.Stream = func(send func([]byte) error) error {
		err := inner(send)
		f(err)
		return err
	}
}

// Free calls Release, if any. r may be nil.
func (r *Response) Free() {
	if r != nil && r.Release != nil {
		r.Release()
	}
}

// Backend calls whatever serves an API. It returns a *bus.Error for
// gateway-made failures (timeouts, unreachable backends); a backend's own
// error status is a normal Response.
type Backend func(ctx context.Context, req *Request) (*Response, error)

// Middleware wraps a Backend with one concern (retries, breakers, ...).
// A nil Middleware stands for a feature the API does not use.
type Middleware func(Backend) Backend

// Chain applies middlewares so that the first one listed runs first (is
// the outermost). Nil middlewares are skipped.
func Chain(b Backend, mws ...Middleware) Backend {
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] != nil {
			b = mws[i](b)
		}
	}
	return b
}

// Adapter builds the instances of one backend type. One adapter serves
// every API of a worker; what the APIs share (the HTTP adapter's client)
// belongs to it.
type Adapter interface {
	// Build makes the instance that serves spec. spec has passed the
	// registry's checks for its type; Build fails only on what those
	// cannot know (a connection that cannot be set up), and the worker
	// then answers the API's calls with an error.
	Build(spec *registry.Backend, o BuildOptions) (Instance, error)
}

// Instance is a built backend: Call serves calls until Close. The worker
// calls Close once, after no call on the instance is in flight any more.
type Instance interface {
	Call(ctx context.Context, req *Request) (*Response, error)
	Close() error
}

// BuildOptions is what an adapter gets from the worker besides the spec.
type BuildOptions struct {
	// Logger for the calls' failures. Never nil.
	Logger *slog.Logger
	// Tracer traces each call to the backend; nil turns tracing off.
	Tracer Tracer
	// Pool is the pool of the API served: the secrets the backend names
	// are that pool's.
	Pool string
}

// Tracer starts the client span of a backend call and puts its trace
// context in h, the headers that go to the backend. method and target name
// the call (for HTTP, the method and the full URL). The span is nil when
// the call is not traced.
type Tracer interface {
	StartCall(ctx context.Context, method, target string, h http.Header) (context.Context, Span)
	// StartRPC starts the client span of a call to an RPC backend, with
	// the RPC conventions: system ("grpc", "nats"), service and method
	// (a nats call names only the subject, as the service), and target
	// the address or subject called.
	StartRPC(ctx context.Context, system, service, method, target string, h http.Header) (context.Context, Span)
}

// Span is the span of one backend call.
type Span interface {
	// Finish ends the span with the call's outcome: the status the
	// backend answered (0 if none) or the error.
	Finish(status int, err error)
	// RPCCode records the status code of the backend's RPC protocol the
	// call ended with (gRPC: rpc.grpc.status_code), before Finish.
	RPCCode(code int)
}

// Finish ends span (nil: not traced) with a call's outcome.
func Finish(span Span, resp *Response, err error) {
	switch {
	case span == nil:
	case err != nil:
		span.Finish(0, err)
	default:
		span.Finish(resp.Status, nil)
	}
}

// Func is an Instance that holds nothing to close.
type Func Backend

// Call calls f.
func (f Func) Call(ctx context.Context, req *Request) (*Response, error) { return f(ctx, req) }

// Close does nothing.
func (Func) Close() error { return nil }

// ClientTLS is the TLS of calls to one backend (an https URL, a grpc
// target with tls settings): the entry's CA bundle or the system's roots,
// its client certificate for mutual TLS, its server name. The files are
// read now; one that does not load is an error naming it.
func ClientTLS(t *registry.BackendTLS) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CA != "" {
		pool, err := bus.LoadCertPool(t.CA)
		if err != nil {
			return nil, fmt.Errorf("backend tls ca_file: %w", err)
		}
		cfg.RootCAs = pool
	}
	if t.Cert != "" {
		cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("backend tls cert_file %s with key_file %s: %w", t.Cert, t.Key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
