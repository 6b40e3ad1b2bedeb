// Package mock is the adapter of backends of type mock: every call gets
// the fixed response written in the entry, without leaving the worker.
package mock

import (
	"context"
	"net/http"

	"github.com/jetway-gw/jetway/backend"
	"github.com/jetway-gw/jetway/registry"
)

// Adapter builds mock instances. It holds nothing.
type Adapter struct{}

// Build compiles the entry's response once; every call shares it (it is
// never mutated).
func (Adapter) Build(spec *registry.Backend, _ backend.BuildOptions) (backend.Instance, error) {
	status, h, body := spec.Static.Compile(http.StatusOK)
	resp := &backend.Response{Status: status, Header: h, Body: body}
	return backend.Func(func(context.Context, *backend.Request) (*backend.Response, error) { return resp, nil }), nil
}
