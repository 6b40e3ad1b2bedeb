// Package workers runs Jetway's worker pools: queue-group subscribers that
// take API requests off NATS, call the API's backend through a pipeline
// built from its registry entry, and reply.
//
// The pipeline follows lura's shape: a Backend is a function from request to
// response, a Middleware wraps one, and each API gets one stack built from
// its definition when the registry changes — never per request.
package workers

import (
	"context"
	"net/http"
	"net/url"

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
}

// Backend calls whatever serves an API. It returns a *bus.Error for
// gateway-made failures (timeouts, unreachable backends); a backend's own
// error status is a normal Response.
type Backend func(ctx context.Context, req *Request) (*Response, error)

// Middleware wraps a Backend with one concern (retries, breakers, ...).
type Middleware func(Backend) Backend

// Chain applies middlewares so that the first one listed runs first.
func Chain(b Backend, mws ...Middleware) Backend {
	for i := len(mws) - 1; i >= 0; i-- {
		b = mws[i](b)
	}
	return b
}
