package edge

import (
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/otel"
)

// recorder wraps the ResponseWriter of a routed request to learn how the
// call ended: the status, the gateway error code if any, the bytes sent.
type recorder struct {
	http.ResponseWriter
	status int
	code   bus.Code
	bytes  int
	rt     *route
	addr   netip.Addr // the client's address (clientAddr)
	chain  string     // the X-Forwarded-For to send on
	app    string     // the authenticated app, if any

	sentPath string // the escaped path as the caller sent it, before canonicalPath
}

// markApp notes the authenticated app of a request.
func markApp(w http.ResponseWriter, app string) {
	if r, ok := w.(*recorder); ok {
		r.app = app
	}
}

// requestAddr is the client address and forwarding chain of a request.
func requestAddr(w http.ResponseWriter, r *http.Request) (netip.Addr, string) {
	if rec, ok := w.(*recorder); ok && rec.addr.IsValid() {
		return rec.addr, rec.chain
	}
	return clientAddr(r, nil)
}

// sentPath is the escaped path as the caller sent it: what a signed
// request signs. Its canonical form, which is routed and forwarded, is a
// function of it, so the signature covers that too.
func sentPath(w http.ResponseWriter, r *http.Request) string {
	if rec, ok := w.(*recorder); ok && rec.sentPath != "" {
		return rec.sentPath
	}
	return r.URL.RawPath
}

var recorderPool = sync.Pool{New: func() any { return new(recorder) }}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += n
	return n, err
}

// markCode notes the gateway error code a response carries.
func markCode(w http.ResponseWriter, code bus.Code) {
	if r, ok := w.(*recorder); ok {
		r.code = code
	}
}

// markRoute notes which API a request was routed to.
func markRoute(w http.ResponseWriter, rt *route) {
	if r, ok := w.(*recorder); ok {
		r.rt = rt
	}
}

// blocked are the codes of calls the gateway refuses on purpose.
var blocked = map[bus.Code]bool{
	bus.CodeRateLimited: true, bus.CodeDegraded: true, bus.CodeCircuitOpen: true, bus.CodeOverloaded: true,
	bus.CodeUnauthenticated: true, bus.CodeForbidden: true, bus.CodeNoSandbox: true, bus.CodePayloadTooLarge: true, bus.CodeBadRequest: true,
}

// observe records a finished routed call in the metrics and the access log.
func (e *Edge) observe(rec *recorder, r *http.Request, id string, start time.Time) {
	rt := rec.rt
	if rt == nil || rec.status == 499 {
		return // unrouted (404/405/400) or the caller went away
	}
	latency := time.Since(start)
	if m := e.o.Metrics; m != nil {
		o, reason := otel.Succeeded, string(rec.code)
		switch {
		case blocked[rec.code]:
			o = otel.Blocked
		case rec.code != "" || rec.status >= 500:
			o = otel.Failed
		}
		m.Record(rt.key, rt.api.Pool, o, reason, latency)
		if rec.app != "" {
			m.RecordApp(rec.app, o)
		}
	}
	if l := e.o.AccessLog; l != nil && l.Enabled(r.Context(), slog.LevelInfo) {
		attrs := []slog.Attr{
			slog.String("request_id", id),
			slog.String("api", rt.api.Name),
			slog.String("method", r.Method),
			slog.String("path", r.URL.RawPath),
			slog.Int("status", rec.status),
			slog.Int64("latency_us", latency.Microseconds()),
			slog.Int("bytes", rec.bytes),
			slog.String("client_ip", rec.addr.String()),
		}
		if tp := r.Header.Get("Traceparent"); len(tp) >= 35 {
			attrs = append(attrs, slog.String("trace_id", tp[3:35]))
		}
		if rec.app != "" {
			attrs = append(attrs, slog.String("app", rec.app))
		}
		if rt.api.IsSandbox() {
			attrs = append(attrs, slog.Bool("sandbox", true))
		}
		if rec.code != "" {
			attrs = append(attrs, slog.String("code", string(rec.code)))
		}
		l.LogAttrs(r.Context(), slog.LevelInfo, "access", attrs...)
	}
}
