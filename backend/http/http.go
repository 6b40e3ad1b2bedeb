// Package httpbackend is the adapter of backends of type http: it calls an
// HTTP service at the entry's URL template, with one fasthttp client shared
// by every API of the worker.
package httpbackend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/jetway-gw/jetway/backend"
	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// Adapter builds the instances of http backends. Its client is shared by
// all of them: connections to a host are kept alive across APIs and across
// registry changes.
type Adapter struct {
	client  *fasthttp.Client
	maxResp int
}

// New returns the adapter; a backend response larger than maxResponse
// bytes is refused (the bus's max payload less room for headers).
func New(maxResponse int) *Adapter {
	return &Adapter{client: newClient(maxResponse), maxResp: maxResponse}
}

// newClient returns the client for HTTP backends.
//
// It is fasthttp's client rather than net/http's: it does each call's I/O
// in the calling goroutine, where net/http hands every request to a write
// goroutine and every response from a read goroutine. On the measured path
// that cut the worker's backend call from ~70 to ~20 µs per request
// (BenchmarkJetway 164 → 115 µs/op, see bench/README.md).
//
// Tuned for a gateway: many keep-alive connections per backend host, no
// normalizing of header names or paths (what the caller sent is what the
// backend gets), no default User-Agent or Content-Type, responses bounded
// by the bus's max payload, and no retries here: a retry policy belongs to
// the API's pipeline, within its deadline and budget.
func newClient(maxResp int) *fasthttp.Client {
	return &fasthttp.Client{
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
		MaxConnsPerHost:               4096,
		MaxIdleConnDuration:           90 * time.Second,
		MaxConnWaitTimeout:            time.Second,
		MaxResponseBodySize:           maxResp,
		ReadBufferSize:                16 << 10,
		WriteBufferSize:               16 << 10,
		MaxIdemponentCallAttempts:     1,
	}
}

// Build compiles the backend's URL template. Without tls settings the
// instance holds nothing of its own to close: its connections belong to
// the adapter's client. With them it has a client of its own, with that
// TLS, whose connections Close ends; a file that does not load fails the
// build (the API answers BAD_GATEWAY until its entry changes).
func (a *Adapter) Build(spec *registry.Backend, o backend.BuildOptions) (backend.Instance, error) {
	in := &instance{client: a.client, tmpl: compileURL(spec.URL), log: o.Logger, tracer: o.Tracer}
	if spec.TLS != nil {
		cfg, err := backend.ClientTLS(spec.TLS)
		if err != nil {
			return nil, err
		}
		in.client = newClient(a.maxResp)
		in.client.TLSConfig = cfg
		in.own = true
	}
	return in, nil
}

// instance calls one HTTP backend. The dial, the write and the read all
// end at the request's deadline.
type instance struct {
	client *fasthttp.Client
	own    bool // client is this instance's (its own TLS), closed with it
	tmpl   urlTemplate
	log    *slog.Logger
	tracer backend.Tracer // nil: tracing off
}

// Close ends the connections of a client of the instance's own; those of
// the shared client stay, for other APIs.
func (h *instance) Close() error {
	if h.own {
		h.client.CloseIdleConnections()
	}
	return nil
}

// Call sends the request to the backend within ctx's deadline.
func (h *instance) Call(ctx context.Context, req *backend.Request) (*backend.Response, error) {
	deadline, _ := ctx.Deadline()
	freq := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(freq)
	freq.Header.SetNoDefaultContentType(true) // send only what the caller sent
	if h.tmpl.usesPath && !plainPath(req.Path) {
		// The edge sends canonical paths only; a path with a dot segment
		// could climb out of the URL's base on the backend.
		return nil, bus.Errorf(bus.CodeBadRequest, "the request path is not a plain path")
	}
	host, err := req.RewrittenHost()
	if err != nil {
		return nil, err
	}
	url := h.tmpl.expand(req)
	var span backend.Span
	if h.tracer != nil {
		_, span = h.tracer.StartCall(ctx, req.Method, url, req.Header)
	}
	freq.SetRequestURI(url)
	freq.Header.SetMethod(req.Method)
	for k, vs := range req.Header {
		for _, v := range vs {
			freq.Header.Add(k, v)
		}
	}
	if req.RequestID != "" {
		freq.Header.Set("X-Request-Id", req.RequestID)
	}
	if host != "" { // the connection still goes to the URL's host
		freq.UseHostHeader = true
		freq.Header.SetHost(host)
	}
	// The backend learns how long the caller still waits, so it can give
	// up in time too.
	freq.Header.Set("X-Request-Timeout", strconv.FormatInt(max(time.Until(deadline).Milliseconds(), 1), 10))
	if len(req.Body) > 0 {
		freq.SetBodyRaw(req.Body)
	}
	fresp := fasthttp.AcquireResponse()
	fresp.Header.SetNoDefaultContentType(true) // pass on only what the backend sent
	err = h.client.DoDeadline(freq, fresp, deadline)
	if span != nil {
		if err != nil {
			span.Finish(0, err)
		} else {
			span.Finish(fresp.StatusCode(), nil)
		}
	}
	if err != nil {
		fasthttp.ReleaseResponse(fresp)
		switch {
		case errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrDialTimeout) || isTimeout(err):
			return nil, bus.Errorf(bus.CodeGatewayTimeout, "backend did not answer within the deadline")
		case errors.Is(err, fasthttp.ErrNoFreeConns):
			return nil, bus.Errorf(bus.CodeOverloaded, "no free connection to the backend")
		case errors.Is(err, fasthttp.ErrBodyTooLarge):
			return nil, bus.Errorf(bus.CodeBadGateway, fmt.Sprintf("backend response exceeds the %d byte limit", h.client.MaxResponseBodySize))
		}
		h.log.Warn("backend call failed", "api", req.API.Name, "request_id", req.RequestID, "err", err)
		return nil, bus.Errorf(bus.CodeBadGateway, "backend unreachable or closed the connection")
	}
	return &backend.Response{
		Status:  fresp.StatusCode(),
		Header:  responseHeader(&fresp.Header),
		Body:    fresp.Body(),
		Release: func() { fasthttp.ReleaseResponse(fresp) },
	}, nil
}

// responseHeader copies a backend's response headers out of fasthttp's
// reused buffers in three allocations whatever their number: the map, one
// string holding every value, one array backing every name's value list
// (a repeated name's list grows on its own). Common names are constants.
func responseHeader(fh *fasthttp.ResponseHeader) http.Header {
	n, size := 0, 0
	for _, v := range fh.All() {
		n++
		size += len(v)
	}
	var b strings.Builder
	b.Grow(size)
	for _, v := range fh.All() {
		b.Write(v)
	}
	values := b.String()
	lists := make([]string, n)
	h := make(http.Header, n)
	i, off := 0, 0
	for k, v := range fh.All() {
		val := values[off : off+len(v)]
		off += len(v)
		key := headerName(k)
		if prev, ok := h[key]; ok {
			h[key] = append(prev, val)
			continue
		}
		lists[i] = val
		h[key] = lists[i : i+1 : i+1]
		i++
	}
	return h
}

// headerName is a header name as a string, without an allocation for the
// names most responses carry.
func headerName(k []byte) string {
	switch string(k) { // compared without a conversion
	case "Content-Type":
		return "Content-Type"
	case "Content-Length":
		return "Content-Length"
	case "Date":
		return "Date"
	case "Server":
		return "Server"
	case "Cache-Control":
		return "Cache-Control"
	case "Content-Encoding":
		return "Content-Encoding"
	case "Vary":
		return "Vary"
	case "Etag":
		return "Etag"
	case "Last-Modified":
		return "Last-Modified"
	case "Set-Cookie":
		return "Set-Cookie"
	case "Location":
		return "Location"
	case "Connection":
		return "Connection"
	}
	return string(k)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// urlTemplate is a backend URL with {param} placeholders, split once.
type urlTemplate struct {
	parts  []string // literal, name, literal, name, ..., literal
	static string   // the URL when it has no placeholders
	hasQ   bool     // the template has its own query string
	// queryFrom is the index in parts of the first placeholder in the
	// query (after '?'); len(parts) when there is none.
	queryFrom int
	usesPath  bool // the template has {request.path}
}

// plainPath reports whether a path is absolute and has no dot segment,
// no empty segment but a trailing one, and no backslash or encoded slash.
func plainPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.Contains(p, "\\") {
		return false
	}
	segs := strings.Split(p[1:], "/")
	if segs[len(segs)-1] == "" {
		segs = segs[:len(segs)-1] // "/" itself, or a trailing slash
	}
	for _, seg := range segs {
		s := strings.ToLower(seg)
		if s == "" || s == "." || s == ".." || s == "%2e" || s == "%2e%2e" || s == ".%2e" || s == "%2e." || strings.Contains(s, "%2f") || strings.Contains(s, "%5c") {
			return false
		}
	}
	return true
}

func compileURL(raw string) urlTemplate {
	t := urlTemplate{hasQ: strings.Contains(raw, "?"), queryFrom: -1}
	rest := raw
	for {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			t.parts = append(t.parts, rest)
			break
		}
		j := strings.IndexByte(rest[i:], '}') // validated at publish
		t.parts = append(t.parts, rest[:i], rest[i+1:i+j])
		if rest[i+1:i+j] == registry.RequestPathPlaceholder {
			t.usesPath = true
		}
		if t.queryFrom < 0 && strings.Contains(raw[:len(raw)-len(rest)+i], "?") {
			t.queryFrom = len(t.parts) - 1
		}
		rest = rest[i+j+1:]
	}
	if t.queryFrom < 0 {
		t.queryFrom = len(t.parts)
	}
	if len(t.parts) == 1 {
		t.static = raw
	}
	return t
}

// expand fills the placeholders from the route parameters, which arrive in
// their escaped form (a canonical path segment), and appends the query. In
// the path they are inserted as they are; in the query they are escaped
// for the query, where '&', '=' and '+' of a segment would otherwise start
// parameters of the caller's choosing or read as a space.
func (t *urlTemplate) expand(req *backend.Request) string {
	var b strings.Builder
	if t.static != "" {
		if req.RawQuery == "" {
			return t.static
		}
		b.Grow(len(t.static) + 1 + len(req.RawQuery))
		b.WriteString(t.static)
	} else {
		params := req.Params()
		for i, p := range t.parts {
			switch {
			case i%2 == 0:
				b.WriteString(p)
			case p == registry.RequestPathPlaceholder:
				b.WriteString(strings.TrimPrefix(req.Path, "/")) // canonical and escaped: the edge made it so
			case i < t.queryFrom:
				b.WriteString(params.Get(p))
			default:
				v := params.Get(p)
				if d, err := url.PathUnescape(v); err == nil {
					v = d
				}
				b.WriteString(url.QueryEscape(v))
			}
		}
	}
	if req.RawQuery != "" {
		if t.hasQ {
			b.WriteByte('&')
		} else {
			b.WriteByte('?')
		}
		b.WriteString(req.RawQuery)
	}
	return b.String()
}
