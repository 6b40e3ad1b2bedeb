package edge

import (
	"cmp"
	"log/slog"
	"net/http"
	"time"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/otel"
)

// blocked are the codes of calls the gateway refuses on purpose.
var blocked = map[bus.Code]bool{
	bus.CodeRateLimited: true, bus.CodeDegraded: true, bus.CodeCircuitOpen: true, bus.CodeOverloaded: true,
	bus.CodeUnauthenticated: true, bus.CodeForbidden: true, bus.CodeNoSandbox: true, bus.CodePayloadTooLarge: true, bus.CodeBadRequest: true,
	bus.CodeInvalidRequest: true,
}

// observe records a finished routed call in the metrics and the access log.
func (e *Edge) observe(c *call, r *http.Request, start time.Time) {
	rt := c.rt
	if rt == nil || c.status == 499 {
		return // unrouted (404/405/400) or the caller went away
	}
	latency := time.Since(start)
	if m := e.o.Metrics; m != nil {
		o, reason := otel.Succeeded, string(c.code)
		switch {
		case blocked[c.code]:
			o = otel.Blocked
		case c.code != "":
			o = otel.Failed
		case c.cacheResult == "hit" || c.cacheResult == "stale":
			// Answered from the cache: a good answer, whatever its status.
		case c.failedAnswer(cmp.Or(c.upstream, c.status)): // the backend's status, not a rewrite's
			o = otel.Failed
			if c.outcome == bus.OutcomeFailed && cmp.Or(c.upstream, c.status) < 500 {
				reason = "CLASSIFIED"
			}
		}
		m.Record(rt.key, rt.api.Pool, o, reason, latency)
		c.observeChannel(m, o)
		if c.app != nil {
			m.RecordApp(c.app.app.ID, o)
		}
	}
	if l := e.o.AccessLog; l != nil && l.Enabled(r.Context(), slog.LevelInfo) {
		attrs := []slog.Attr{
			slog.String("request_id", c.id),
			slog.String("api", rt.api.Name),
			slog.String("method", r.Method),
			slog.String("path", r.URL.RawPath),
			slog.Int("status", c.status),
			slog.Int64("latency_us", latency.Microseconds()),
			slog.Int("bytes", c.bytes),
			slog.String("client_ip", c.addr.String()),
		}
		if tp := r.Header.Get("Traceparent"); len(tp) >= 35 {
			attrs = append(attrs, slog.String("trace_id", tp[3:35]))
		}
		if c.app != nil {
			attrs = append(attrs, slog.String("app", c.app.app.ID))
		}
		if rt.api.ForSandbox() {
			attrs = append(attrs, slog.Bool("sandbox", true))
		}
		if rt.revision != "" {
			attrs = append(attrs, slog.String("draft", rt.revision))
		}
		if c.code != "" {
			attrs = append(attrs, slog.String("code", string(c.code)))
		}
		if c.fault != "" {
			attrs = append(attrs, slog.String("fault", c.fault))
		}
		if c.cacheResult != "" {
			attrs = append(attrs, slog.String("cache", c.cacheResult))
		}
		l.LogAttrs(r.Context(), slog.LevelInfo, "access", attrs...)
	}
}
