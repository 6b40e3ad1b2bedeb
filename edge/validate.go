package edge

import (
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/resilience"
	"github.com/jetway-gw/jetway/schemas"
)

// requestCheck is an API tier's request validation, compiled once per
// registry change that touches it.
type requestCheck struct {
	schema *schemas.RequestSchema // nil: it did not compile, every call is refused
	status int
	params bool // the schema checks the route parameters
}

// checkSettings is what a requestCheck is built from: the entry's block
// and the shared schemas it references, as they were at the build.
type checkSettings struct {
	Validate *registry.Validate
	Shared   map[string]uint64 // name → revision
}

// compileCheck returns the validation of a tier (nil: none), kept across
// registry changes that leave its settings and shared schemas alone. A
// validation that does not compile at the edge (a shared schema deleted
// since it was published) refuses every call of the tier: fail closed.
func (e *Edge) compileCheck(key string, v *registry.Validate, shared map[string]*registry.JSONSchema) *requestCheck {
	if v == nil {
		return nil
	}
	prev := e.checkDeps[key]
	fp := resilience.Fingerprint(checkSettings{v, depRevisions(prev, shared)})
	chk, err := e.checks.Get(key, fp, func() (*requestCheck, error) {
		used := map[string]bool{}
		sch, problems := v.Compile(func(name string) ([]byte, bool) {
			used[name] = true
			s, ok := shared[name]
			if !ok {
				return nil, false
			}
			return s.Schema, true
		})
		e.nextDeps[key] = used
		if len(problems) > 0 {
			return nil, fmt.Errorf("%v", problems)
		}
		return &requestCheck{schema: sch, status: v.StatusOrDefault(), params: sch.Checks(schemas.PartParams)}, nil
	})
	if _, rebuilt := e.nextDeps[key]; !rebuilt {
		e.nextDeps[key] = prev
	}
	if err != nil {
		e.log.Error("request validation does not compile; the api refuses every call until it does", "api", key, "err", err)
		return &requestCheck{status: http.StatusInternalServerError}
	}
	return chk
}

// depRevisions are the revisions of the shared schemas a build used (0:
// absent), for the fingerprint: a change to one of them rebuilds.
func depRevisions(used map[string]bool, shared map[string]*registry.JSONSchema) map[string]uint64 {
	if len(used) == 0 {
		return nil
	}
	m := make(map[string]uint64, len(used))
	for name := range used {
		if s, ok := shared[name]; ok {
			m[name] = s.Revision
		} else {
			m[name] = 0
		}
	}
	return m
}

// validate checks the request against its API's schemas: every problem
// is listed in the refusal.
func (c *call) validate() error {
	chk := c.rt.check
	if chk == nil {
		return nil
	}
	if chk.schema == nil {
		return c.refuse(bus.CodeInternal, "request validation of api "+c.rt.api.Name+" is not loaded on this edge")
	}
	in := schemas.Request{Header: c.r.Header, RawQuery: c.r.URL.RawQuery, Body: c.body.Bytes()}
	if chk.params {
		in.Params = routeParams(c.r)
	}
	problems, more := chk.schema.Validate(&in)
	if len(problems) == 0 {
		c.decoded = in.Decoded
		return nil
	}
	n := len(problems) + more
	msg := fmt.Sprintf("the request does not match the schemas of api %s: %d problem", c.rt.api.Name, n)
	if n > 1 {
		msg += "s"
	}
	return &Error{Code: bus.CodeInvalidRequest, Status: chk.status, Message: msg, Problems: problems, More: more}
}

// routeParams yields the route's parameters of a request.
func routeParams(r *http.Request) func(yield func(string, string) bool) {
	return func(yield func(string, string) bool) {
		rctx := chi.RouteContext(r.Context())
		if rctx == nil {
			return
		}
		for i, k := range rctx.URLParams.Keys {
			if i < len(rctx.URLParams.Values) && !yield(k, rctx.URLParams.Values[i]) {
				return
			}
		}
	}
}
