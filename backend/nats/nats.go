// Package natsbackend is the adapter of backends of type nats: it sends
// each call as a NATS request to the entry's subject on Jetway's own NATS,
// where a NATS service (a nats.go micro service or any request-reply
// responder) answers it. No code per API: the request body is the message
// and the reply is the response.
//
// What the service receives:
//
//   - the body as the message data;
//   - the caller's headers, less those NATS or Jetway give meaning to
//     (Nats-*, Jetway-*, Status, Description, KV-Operation, Nmqtt-*);
//   - Jetway-Method, Jetway-Path (escaped form), Jetway-Query (raw) and one
//     Jetway-Param-<name> per route parameter, so one service can serve
//     several routes;
//   - X-Request-Id, traceparent when traced, and X-Request-Timeout: the
//     milliseconds the caller still waits.
//
// What the caller gets: 200 with the reply's data and headers (less Nats-*),
// or, when the reply carries Nats-Service-Error-Code (the micro services'
// error), that code as the status when it is 200–599 (else 502) and a JSON
// body {"error": Nats-Service-Error, "error_code": the code, "data": the reply}.
// A subject nobody answers is 503 NO_WORKERS at once (no responders); a
// service that does not answer within the deadline is 504.
//
// On Jetway's own NATS a service answers under bus.ServicePrefix, the only
// subjects a worker's user may call. An entry with "server": {"secret":
// NAME} calls the service on another NATS system instead: the secret NAME
// of the API's pool (registry.NATSServer, in jetway_secrets) says where
// and how to log in. The worker dials it on the first call, shares the
// connection among the pool's APIs that name the secret, reads the secret
// again every 30 s, and dials anew when it changed (remote.go).
package natsbackend

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/net/http/httpguts"

	"github.com/jetway-gw/jetway/backend"
	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// The headers a service reads besides the caller's.
const (
	HeaderMethod      = "Jetway-Method"
	HeaderPath        = "Jetway-Path"
	HeaderQuery       = "Jetway-Query"
	HeaderParamPrefix = "Jetway-Param-"
)

// The headers of a micro service's error reply (nats.go micro).
const (
	headerServiceError     = "Nats-Service-Error"
	headerServiceErrorCode = "Nats-Service-Error-Code"
)

// Adapter builds the instances of nats backends over the worker's
// connection (its user may publish backend calls only under
// bus.ServicePrefix), or over connections to other NATS systems that
// secrets describe.
type Adapter struct {
	nc      *nats.Conn
	maxResp int
	secrets SecretLoader

	mu      sync.Mutex
	remotes map[string]*remote // by pool and secret name
}

// New returns the adapter; a reply larger than maxResponse bytes is
// refused (the bus's max payload less room for headers). secrets reads the
// secrets of entries that name a server; nil refuses such entries.
func New(nc *nats.Conn, maxResponse int, secrets SecretLoader) *Adapter {
	return &Adapter{nc: nc, maxResp: maxResponse, secrets: secrets}
}

// Build holds the subject, and for a server the pool's shared connection
// to it; the instance opens nothing of its own.
func (a *Adapter) Build(spec *registry.Backend, o backend.BuildOptions) (backend.Instance, error) {
	in := &instance{nc: a.nc, subject: spec.Subject, maxResp: a.maxResp, tracer: o.Tracer}
	if spec.Server != nil {
		if a.secrets == nil || o.Pool == "" {
			return nil, errors.New("this worker cannot read secrets for nats backends on another server")
		}
		in.remote, in.adapter = a.remote(o.Pool, spec.Server.Secret, o.Logger), a
		return in, nil
	}
	if a.nc == nil {
		return nil, errors.New("nats backends need the worker's NATS connection")
	}
	return in, nil
}

type instance struct {
	nc      *nats.Conn
	subject string
	maxResp int
	tracer  backend.Tracer

	remote  *remote  // the other NATS system called, nil for Jetway's own
	adapter *Adapter // which holds remote
	closed  atomic.Bool
}

func (in *instance) Close() error {
	if in.remote != nil && in.closed.CompareAndSwap(false, true) {
		in.adapter.release(in.remote)
	}
	return nil
}

// Call sends the request to the service and waits for its reply within
// ctx's deadline.
func (in *instance) Call(ctx context.Context, req *backend.Request) (*backend.Response, error) {
	nc := in.nc
	if in.remote != nil {
		var err error
		if nc, err = in.remote.conn(ctx); err != nil {
			return nil, err
		}
	}
	deadline, _ := ctx.Deadline()
	msg := &nats.Msg{Subject: in.subject, Data: req.Body, Header: requestHeader(req, deadline)}
	var span backend.Span
	if in.tracer != nil {
		_, span = in.tracer.StartRPC(ctx, "nats", in.subject, "", in.subject, http.Header(msg.Header))
	}
	reply, err := nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		berr := callError(err)
		backend.Finish(span, nil, berr)
		return nil, berr
	}
	resp, err := in.response(reply)
	backend.Finish(span, resp, err)
	return resp, err
}

// callError is the gateway error of a request that got no reply.
func callError(err error) error {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return bus.Errorf(bus.CodeNoWorkers, "no NATS service answers the backend's subject")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return bus.Errorf(bus.CodeGatewayTimeout, "backend did not answer within the deadline")
	case errors.Is(err, context.Canceled):
		return bus.Errorf(bus.CodeGatewayTimeout, "the call was cancelled")
	case errors.Is(err, nats.ErrMaxPayload):
		return bus.Errorf(bus.CodeBadGateway, "the request is over the NATS max payload")
	case errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionReconnecting):
		return bus.Errorf(bus.CodeBadGateway, "the backend's NATS server is not connected; reconnecting")
	}
	return bus.Errorf(bus.CodeBadGateway, "backend call over NATS failed: "+err.Error())
}

// requestHeader is what the service gets besides the body.
func requestHeader(req *backend.Request, deadline time.Time) nats.Header {
	h := make(nats.Header, len(req.Header)+8)
	for k, vs := range req.Header {
		if reserved(k) {
			continue
		}
		h[k] = vs
	}
	h[HeaderMethod] = []string{req.Method}
	h[HeaderPath] = []string{req.Path}
	if req.RawQuery != "" {
		h[HeaderQuery] = []string{req.RawQuery}
	}
	if req.RawParams != "" {
		for k, vs := range req.Params() {
			h[HeaderParamPrefix+textproto.CanonicalMIMEHeaderKey(k)] = vs
		}
	}
	if req.RequestID != "" {
		h["X-Request-Id"] = []string{req.RequestID}
	}
	if !deadline.IsZero() {
		h["X-Request-Timeout"] = []string{strconv.FormatInt(max(time.Until(deadline).Milliseconds(), 1), 10)}
	}
	return h
}

// reserved reports a header name the service must not get from the caller:
// one NATS reads as its own (Nats-Msg-Id would dedupe in a stream on the
// subject; Status, Description, KV-Operation, Nmqtt-*) and Jetway's, which
// Jetway sets (bus.Collides covers both).
func reserved(name string) bool { return bus.Collides(name) }

// response turns the service's reply into the caller's response.
func (in *instance) response(reply *nats.Msg) (*backend.Response, error) {
	if len(reply.Data) > in.maxResp {
		return nil, bus.Errorf(bus.CodeBadGateway, "backend reply exceeds the "+strconv.Itoa(in.maxResp)+" byte limit")
	}
	code := reply.Header.Get(headerServiceErrorCode)
	h := make(http.Header, len(reply.Header))
	for k, vs := range reply.Header {
		// NATS's own headers stay on NATS; the length is the body's,
		// whatever the service says; a name or value HTTP cannot carry
		// (NATS can: NUL, control bytes) is dropped.
		if bus.Collides(k) || strings.EqualFold(k, "Content-Length") || !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		key := textproto.CanonicalMIMEHeaderKey(k)
		for _, v := range vs {
			if httpguts.ValidHeaderFieldValue(v) {
				h[key] = append(h[key], v)
			}
		}
	}
	if code == "" {
		return &backend.Response{Status: http.StatusOK, Header: h, Body: reply.Data}, nil
	}
	// An error's code is its status when it is one an error can have: a
	// 1xx would be read by the caller's HTTP stack as an interim answer.
	status := http.StatusBadGateway
	if n, err := strconv.Atoi(code); err == nil && n >= 200 && n <= 599 {
		status = n
	}
	body := serviceError{Error: reply.Header.Get(headerServiceError), Code: code}
	if len(reply.Data) > 0 {
		if json.Valid(reply.Data) {
			body.Data = json.RawMessage(reply.Data)
		} else {
			s, _ := json.Marshal(string(reply.Data))
			body.Data = s
		}
	}
	b, _ := json.Marshal(body)
	h.Set("Content-Type", "application/json")
	return &backend.Response{Status: status, Header: h, Body: b}, nil
}

// serviceError is the body of a micro service's error reply.
type serviceError struct {
	Error string          `json:"error"`
	Code  string          `json:"error_code"`
	Data  json.RawMessage `json:"data,omitempty"`
}
