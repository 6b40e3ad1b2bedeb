package push

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// ServeSSE serves a session as Server-Sent Events: each message an event
// whose id is its cursor (a browser's EventSource sends it back as
// Last-Event-ID when it reconnects), a gap as event "gap", the start as
// event "ready", the end as event "close" with its reason. It closes the
// session.
func (s *Server) ServeSSE(w http.ResponseWriter, r *http.Request, ss *Session) {
	defer ss.close()
	rc := http.NewResponseController(w)
	// The request is read: the server's read timeout must not end the
	// stream. Writes get their own deadline (flush).
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	out := &sseSink{w: w, rc: rc, timeout: s.o.WriteTimeout, sb: ss.sb}
	out.buf = append(out.buf, "retry: 1000\n\n"...)
	stop := context.AfterFunc(r.Context(), func() { ss.sb.endAs(endClientGone, goneReason) })
	defer stop()
	reason, err := ss.pump(r.Context(), out)
	if err == nil && reason != "" && reason != goneReason {
		out.event("close", "", jsonText(map[string]string{"reason": reason}))
		_ = out.flush()
	}
}

type sseSink struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	sb      *sub
	buf     []byte
}

func (o *sseSink) ready(topic string, c Cursor) {
	o.event("ready", "", jsonText(map[string]string{"topic": topic, "cursor": c.String()}))
}

func (o *sseSink) message(_, epoch string, d *delivery) {
	if d.sse != nil && d.epoch == epoch {
		o.buf = append(o.buf, d.sse...)
		return
	}
	o.event("", Cursor{Epoch: epoch, Seq: d.seq}.String(), d.data)
}

// sseEvent is a message's event.
func sseEvent(epoch string, d *delivery) []byte {
	var e sseSink
	e.event("", Cursor{Epoch: epoch, Seq: d.seq}.String(), d.data)
	return e.buf
}

func (o *sseSink) gap(_ string, g Gap) { o.event("gap", "", jsonText(g)) }

// event appends one event. Data's line ends (CR, LF, CRLF) become LF: SSE
// splits data at each.
func (o *sseSink) event(name, id string, data []byte) {
	if id != "" {
		o.buf = append(o.buf, "id: "...)
		o.buf = append(o.buf, id...)
		o.buf = append(o.buf, '\n')
	}
	if name != "" {
		o.buf = append(o.buf, "event: "...)
		o.buf = append(o.buf, name...)
		o.buf = append(o.buf, '\n')
	}
	for {
		i := bytes.IndexAny(data, "\r\n")
		o.buf = append(o.buf, "data: "...)
		if i < 0 {
			o.buf = append(o.buf, data...)
			o.buf = append(o.buf, '\n')
			break
		}
		o.buf = append(o.buf, data[:i]...)
		o.buf = append(o.buf, '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	o.buf = append(o.buf, '\n')
}

func (o *sseSink) flush() error {
	if len(o.buf) == 0 {
		return nil
	}
	err := o.sb.write(func() error {
		_ = o.rc.SetWriteDeadline(time.Now().Add(o.timeout))
		if _, err := o.w.Write(o.buf); err != nil {
			return err
		}
		return o.rc.Flush()
	})
	o.buf = reuse(o.buf)
	return err
}

func (o *sseSink) pending() int { return len(o.buf) }

func (o *sseSink) ping() error {
	o.buf = append(o.buf, ": ping\n\n"...)
	return o.flush()
}

func jsonText(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
