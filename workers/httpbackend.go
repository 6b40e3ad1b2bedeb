package workers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// NewTransport returns the HTTP transport workers use for backends, tuned
// for a gateway: many idle keep-alive connections per backend host (the
// default of 2 makes every burst dial anew), no transparent compression (the
// backend's encoding passes through untouched), no proxy from the
// environment, and bounded dial and TLS handshake times.
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   3 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          8192,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   3 * time.Second,
		ExpectContinueTimeout: 0,
		DisableCompression:    true,
		ReadBufferSize:        32 << 10,
		WriteBufferSize:       32 << 10,
	}
}

// urlTemplate is a backend URL with {param} placeholders, split once.
type urlTemplate struct {
	parts  []string // literal, name, literal, name, ..., literal
	static string   // the URL when it has no placeholders
	hasQ   bool     // the template has its own query string
}

func compileURL(raw string) urlTemplate {
	t := urlTemplate{hasQ: strings.Contains(raw, "?")}
	rest := raw
	for {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			t.parts = append(t.parts, rest)
			break
		}
		j := strings.IndexByte(rest[i:], '}') // validated at publish
		t.parts = append(t.parts, rest[:i], rest[i+1:i+j])
		rest = rest[i+j+1:]
	}
	if len(t.parts) == 1 {
		t.static = raw
	}
	return t
}

// expand fills the placeholders from the route parameters, which arrive in
// their escaped form and are inserted as they are, and appends the query.
func (t *urlTemplate) expand(req *Request) string {
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
			if i%2 == 0 {
				b.WriteString(p)
			} else {
				b.WriteString(params.Get(p))
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

// bufPool holds response body buffers.
var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// httpBackend calls an HTTP backend.
type httpBackend struct {
	client  *http.Client
	tmpl    urlTemplate
	maxResp int64
	log     *slog.Logger
}

func newHTTPBackend(client *http.Client, b registry.Backend, maxResp int64, log *slog.Logger) Backend {
	h := &httpBackend{client: client, tmpl: compileURL(b.URL), maxResp: maxResp, log: log}
	return h.call
}

func (h *httpBackend) call(ctx context.Context, req *Request) (*Response, error) {
	var body io.Reader = http.NoBody
	if len(req.Body) > 0 {
		body = bytes.NewReader(req.Body)
	}
	out, err := http.NewRequestWithContext(ctx, req.Method, h.tmpl.expand(req), body)
	if err != nil {
		return nil, bus.Errorf(bus.CodeBadRequest, "request cannot be sent to the backend")
	}
	out.ContentLength = int64(len(req.Body))
	out.Header = req.Header
	if out.Header == nil {
		out.Header = http.Header{}
	}
	if req.RequestID != "" {
		out.Header.Set("X-Request-Id", req.RequestID)
	}
	resp, err := h.client.Do(out)
	if err != nil {
		return nil, h.callError(ctx, req, err)
	}
	defer resp.Body.Close()
	if resp.ContentLength > h.maxResp {
		return nil, bus.Errorf(bus.CodeBadGateway, fmt.Sprintf("backend response of %d bytes exceeds the %d byte limit", resp.ContentLength, h.maxResp))
	}
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	if resp.ContentLength > 0 {
		buf.Grow(int(resp.ContentLength))
	}
	n, err := buf.ReadFrom(io.LimitReader(resp.Body, h.maxResp+1))
	if err != nil {
		bufPool.Put(buf)
		return nil, h.callError(ctx, req, err)
	}
	if n > h.maxResp {
		bufPool.Put(buf)
		return nil, bus.Errorf(bus.CodeBadGateway, fmt.Sprintf("backend response exceeds the %d byte limit", h.maxResp))
	}
	return &Response{
		Status:  resp.StatusCode,
		Header:  resp.Header,
		Body:    buf.Bytes(),
		Release: func() { bufPool.Put(buf) },
	}, nil
}

// callError turns a failed backend call into a gateway error. The caller
// learns what kind of failure it was; the backend's address stays in the
// log.
func (h *httpBackend) callError(ctx context.Context, req *Request, err error) error {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return bus.Errorf(bus.CodeGatewayTimeout, "backend did not answer within the deadline")
	}
	h.log.Warn("backend call failed", "api", req.API.Name, "request_id", req.RequestID, "err", err)
	return bus.Errorf(bus.CodeBadGateway, "backend unreachable or closed the connection")
}
