package workers

import (
	"context"
	"net/http"

	"github.com/jetway-gw/jetway/registry"
)

// newMockBackend answers every call with the fixed response of the entry.
// The response is built once; every call shares it (it is never mutated).
func newMockBackend(b registry.Backend) Backend {
	h := http.Header{}
	for k, v := range b.Headers {
		h.Set(k, v)
	}
	var body []byte
	switch {
	case b.Body != nil:
		body = []byte(*b.Body)
	case b.JSON != nil:
		body = []byte(b.JSON)
		if h.Get("Content-Type") == "" {
			h.Set("Content-Type", "application/json")
		}
	}
	resp := &Response{Status: b.Status, Header: h, Body: body}
	return func(context.Context, *Request) (*Response, error) { return resp, nil }
}
