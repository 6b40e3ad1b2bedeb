package registry

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jetway-gw/jetway/expr"
	"github.com/jetway-gw/jetway/schemas"
)

// Rewrite adapts an API's requests and responses at the edge, declared in
// the entry: no code, no scripting. The request is rewritten after
// validation (the schema checks what the caller sent) and before the cache
// lookup and NATS; the response before it is cached and sent.
type Rewrite struct {
	Request  *RequestRewrite  `json:"request,omitempty"`
	Response *ResponseRewrite `json:"response,omitempty"`
}

// RequestRewrite changes what the backend gets.
type RequestRewrite struct {
	// When, a CEL condition (package expr), limits the rewrite to the
	// calls it holds for.
	When string `json:"when,omitempty"`
	// Path rewrites the request path: a regexp on the canonical path and
	// its replacement ($1 for a group), or a template of the route's
	// parameters. What backends see of it: a nats service's Jetway-Path,
	// an http backend's {request.path}.
	Path *PathRewrite `json:"path,omitempty"`
	// Method replaces the request's method.
	Method string `json:"method,omitempty"`
	// Host is the Host an http backend gets (a gRPC backend's :authority)
	// instead of its URL's; X-Forwarded-Host still names the caller's.
	Host    string          `json:"host,omitempty"`
	Headers *HeaderRewrite  `json:"headers,omitempty"`
	Query   *QueryRewrite   `json:"query,omitempty"`
	Body    *JSONBodyChange `json:"body,omitempty"`
}

// ResponseRewrite changes what the caller gets.
type ResponseRewrite struct {
	// When, a CEL condition on the call and its response (response.status,
	// response.headers, response.json), limits the rewrite.
	When string `json:"when,omitempty"`
	// Status maps a backend status to another ("404": 200).
	Status  map[string]int  `json:"status,omitempty"`
	Headers *HeaderRewrite  `json:"headers,omitempty"`
	Body    *JSONBodyChange `json:"body,omitempty"`
}

// PathRewrite is a regexp replacement of the request path, or a template:
// the new path with {name} for a route parameter and {*} for the
// catch-all, as the canonical path has them (escaped).
type PathRewrite struct {
	Regex    string `json:"regex,omitempty"`
	Replace  string `json:"replace,omitempty"`
	Template string `json:"template,omitempty"`
}

// HeaderRewrite sets (replaces), adds (appends) and removes headers, in
// the order remove, set, add.
type HeaderRewrite struct {
	Set    map[string]string `json:"set,omitempty"`
	Add    map[string]string `json:"add,omitempty"`
	Remove []string          `json:"remove,omitempty"`
}

// QueryRewrite removes, sets (replaces) and adds (appends) query
// parameters, in that order.
type QueryRewrite struct {
	Set    map[string]string `json:"set,omitempty"`
	Add    map[string]string `json:"add,omitempty"`
	Remove []string          `json:"remove,omitempty"`
}

// JSONBodyChange changes a JSON body by JSON pointer, in the order remove,
// rename, set. A pointer that names nothing is no error: removing or
// renaming a missing field changes nothing, setting one creates it (and
// the objects on its way).
type JSONBodyChange struct {
	Set    map[string]json.RawMessage `json:"set,omitempty"`
	Remove []string                   `json:"remove,omitempty"`
	Rename map[string]string          `json:"rename,omitempty"`
}

// reservedHeader reports whether a rewrite may not touch a header: the
// wire's own (Jetway-*), what Jetway sets itself, and framing.
func reservedHeader(name string) bool {
	c := http.CanonicalHeaderKey(name)
	switch c {
	case "Content-Length", "Transfer-Encoding", "Connection", "Host", "Te", "Trailer", "Upgrade",
		"X-Request-Id", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip",
		"X-Jetway-App", "X-Jetway-Sandbox", "X-Jetway-Fallback", "X-Jetway-Fault", "X-Cache":
		return true
	}
	return strings.HasPrefix(c, "Jetway-") || strings.HasPrefix(c, "Nats-")
}

func (h *HeaderRewrite) check(prefix string, add func(path, format string, args ...any)) {
	if h == nil {
		return
	}
	names := func(what string, each func(func(string))) {
		each(func(n string) {
			switch {
			case !validHeaderName(n):
				add(prefix+"."+what, "%q is not a header name", n)
			case reservedHeader(n):
				add(prefix+"."+what, "%s is Jetway's own or framing: a rewrite may not touch it", http.CanonicalHeaderKey(n))
			}
		})
	}
	for _, m := range []struct {
		what string
		m    map[string]string
	}{{"set", h.Set}, {"add", h.Add}} {
		names(m.what, func(f func(string)) {
			for k, v := range m.m {
				f(k)
				if strings.ContainsAny(v, "\r\n\x00") {
					add(prefix+"."+m.what+"."+k, "a header value may not hold CR, LF or NUL")
				}
			}
		})
	}
	names("remove", func(f func(string)) {
		for _, k := range h.Remove {
			f(k)
		}
	})
}

func (b *JSONBodyChange) check(prefix string, add func(path, format string, args ...any)) {
	if b == nil {
		return
	}
	ptr := func(path, p string) {
		if p == "" || p[0] != '/' {
			add(path, "%q is not a JSON pointer into the body (it starts with /)", p)
		}
	}
	for p, v := range b.Set {
		ptr(prefix+".set", p)
		if _, err := schemas.DecodeJSON(v); err != nil {
			add(prefix+".set."+p, "must be a JSON value that parses one way only: %v", err)
		}
	}
	for _, p := range b.Remove {
		ptr(prefix+".remove", p)
	}
	for from, to := range b.Rename {
		ptr(prefix+".rename", from)
		ptr(prefix+".rename", to)
		if strings.HasPrefix(to+"/", from+"/") {
			add(prefix+".rename."+from, "cannot move a field into itself (%s)", to)
		}
	}
}

// check adds the rewrite's problems at prefix; params and catchAll
// describe the route path (what a path template may name).
func (r *Rewrite) check(prefix string, params []string, catchAll bool, add func(path, format string, args ...any)) {
	if r == nil {
		return
	}
	when := func(path, src string) {
		if src == "" {
			return
		}
		if _, err := expr.Compile(src); err != nil {
			add(path, "%v", err)
		}
	}
	if q := r.Request; q != nil {
		when(prefix+".request.when", q.When)
		if p := q.Path; p != nil {
			p.check(prefix+".request.path", params, catchAll, add)
		}
		if q.Host != "" {
			if err := checkHostHeader(q.Host); err != nil {
				add(prefix+".request.host", "%v", err)
			}
		}
		switch q.Method {
		case "", http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		default:
			add(prefix+".request.method", "must be GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS")
		}
		q.Headers.check(prefix+".request.headers", add)
		q.Body.check(prefix+".request.body", add)
		if qr := q.Query; qr != nil {
			for what, m := range map[string]map[string]string{"set": qr.Set, "add": qr.Add} {
				for k := range m {
					if k == "" {
						add(prefix+".request.query."+what, "a parameter name must not be empty")
					}
				}
			}
		}
	}
	if s := r.Response; s != nil {
		when(prefix+".response.when", s.When)
		for from, to := range s.Status {
			if n, err := strconv.Atoi(from); err != nil || n < 100 || n > 599 {
				add(prefix+".response.status", "%q is not a status (100-599)", from)
			}
			if to < 200 || to > 599 {
				add(prefix+".response.status."+from, "must map to a status from 200 to 599")
			}
		}
		s.Headers.check(prefix+".response.headers", add)
		s.Body.check(prefix+".response.body", add)
	}
}

func (p *PathRewrite) check(prefix string, params []string, catchAll bool, add func(path, format string, args ...any)) {
	if p.Template != "" {
		if p.Regex != "" || p.Replace != "" {
			add(prefix, "a path rewrite is a template or a regex and its replacement, not both")
			return
		}
		if !strings.HasPrefix(p.Template, "/") {
			add(prefix+".template", "must start with /")
		}
		names, err := templateNames(p.Template)
		if err != nil {
			add(prefix+".template", "%v", err)
			return
		}
		for _, n := range names {
			switch {
			case n == "*" && !catchAll:
				add(prefix+".template", `uses {*} but the route path has no "/*"`)
			case n == RequestPathPlaceholder:
				add(prefix+".template", "{%s} is the path itself: name route parameters", n)
			case n != "*" && !slices.Contains(params, n):
				add(prefix+".template", "uses {%s}, which is not a parameter of the route path", n)
			}
		}
		return
	}
	if p.Regex == "" || p.Replace == "" {
		add(prefix, "needs a template, or a regex and its replacement")
		return
	}
	if _, err := regexp.Compile(p.Regex); err != nil {
		add(prefix+".regex", "%v", err)
	}
	if !strings.HasPrefix(p.Replace, "/") && !strings.HasPrefix(p.Replace, "$") {
		add(prefix+".replace", "must start with / (or a group that does)")
	}
}

// checkHostHeader checks a Host a rewrite sends: a lower-case host name
// (no wildcard), with an optional port.
func checkHostHeader(h string) error {
	name, port, hasPort := strings.Cut(h, ":")
	if hasPort {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] < '1' || port[0] > '9' {
			return fmt.Errorf("%q: the port must be a number from 1 to 65535", h)
		}
	}
	if strings.HasPrefix(name, "*") {
		return fmt.Errorf("%q: a Host is one name, not a wildcard", h)
	}
	return CheckRouteHost(name)
}

// HostRewrite is the Host a tier's request rewrite sends ("" for none): a
// worker sends no other the edge asks for.
func (a *API) HostRewrite() string {
	if a.Rewrite == nil || a.Rewrite.Request == nil {
		return ""
	}
	return a.Rewrite.Request.Host
}

// checkHostRewrite refuses a host rewrite for a backend that has no Host:
// a nats service.
func checkHostRewrite(path string, r *Rewrite, backendType string, add func(path, format string, args ...any)) {
	if r == nil || r.Request == nil || r.Request.Host == "" {
		return
	}
	if backendType == BackendNATS {
		add(path, "a nats service has no Host to rewrite (http and grpc backends do)")
	}
}
