package workers

import (
	"context"
	"net/http"

	"github.com/jetway-gw/jetway/registry"
)

// newMockBackend answers every call with the fixed response of the entry.
// The response is built once; every call shares it (it is never mutated).
func newMockBackend(b registry.Backend) Backend {
	status, h, body := b.Static.Compile(http.StatusOK)
	resp := &Response{Status: status, Header: h, Body: body}
	return func(context.Context, *Request) (*Response, error) { return resp, nil }
}
