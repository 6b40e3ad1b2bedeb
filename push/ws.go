package push

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
)

// MaxInboundFrame bounds a client's frame; a larger one closes the
// connection with 1009.
const MaxInboundFrame = 64 << 10

// WebSocket subprotocols: the one the edge selects when offered, and the
// two that carry a browser's credentials beside it (a browser cannot set
// a WebSocket's headers):
//
//	new WebSocket(url, ["jetway.v1", "jetway.key." + apiKey])
const (
	Subprotocol       = "jetway.v1"
	SubprotocolKey    = "jetway.key."
	SubprotocolBearer = "jetway.bearer."
)

// Close codes a client sees besides the standard ones.
const (
	// CloseRevoked: the connection may no longer stay (its app disabled,
	// its key rotated, its topic or grant gone). Reconnecting is refused
	// until that changes.
	CloseRevoked websocket.StatusCode = 4001
)

// ServeWS serves a session over WebSocket. Each text frame from the edge
// holds one or more JSON objects, one per line:
//
//	{"type":"ready","topic":T,"cursor":"E:S"}
//	{"type":"message","topic":T,"cursor":"E:S","data":"..."}
//	{"type":"gap","topic":T,"reason":"expired","asked":"E:S","resume":"E:S"}
//
// The client resumes by connecting with after=<the last cursor it has>,
// or after=ack: after the last it acked. Frames from the client are JSON
// objects: {"type":"ack","cursor":"E:S"}; a group member's
// {"type":"ack","receipt":R} and {"type":"nack","receipt":R,"delay":"10s"};
// {"type":"token","token":JWT} to refresh its token (others are ignored).
// A frame over 64 KiB closes with 1009, one that is not UTF-8 or not a
// JSON object with 1007, a bad ack, nack or token with 1008, and so does
// a client past its command rate (limits.go: every frame counts, pings
// and pongs too). A shutting-down edge closes with 1012 (reconnect, to
// any edge); a revoked subscription with 4001. It closes the session.
//
// ServeWS returns once the connection is upgraded: the session goes on in
// a goroutine of its own, so that an idle connection keeps a fresh small
// stack rather than the HTTP server's deep one (the handler's goroutine
// ends; a hijacked connection does not need it).
func (s *Server) ServeWS(w http.ResponseWriter, r *http.Request, ss *Session) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// The edge has checked Origin against the topic's list.
		InsecureSkipVerify: true,
		CompressionMode:    websocket.CompressionDisabled,
		Subprotocols:       []string{Subprotocol},
		// A ping or pong is a command like any frame (limits.go): past
		// the rate a ping is not answered, and the connection closes.
		OnPingReceived: func(context.Context, []byte) bool { return ss.control() },
		OnPongReceived: func(context.Context, []byte) { ss.control() },
	})
	if err != nil {
		ss.sb.ended(endFrameError)
		ss.close()
		return // Accept wrote the refusal
	}
	// The request's context ends when the handler returns: the
	// connection's is its own.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	go s.serveWS(ctx, cancel, c, ss)
}

// serveWS serves an upgraded connection until it ends.
func (s *Server) serveWS(ctx context.Context, cancel context.CancelFunc, c *websocket.Conn, ss *Session) {
	defer ss.close()
	defer cancel()
	defer func() { _ = c.CloseNow() }()
	c.SetReadLimit(MaxInboundFrame)
	abort := func() { _ = c.CloseNow() } // a write blocked past the timeout
	ss.sb.abort.Store(&abort)
	type closing struct {
		code   websocket.StatusCode
		reason string
	}
	closed := make(chan closing, 1)
	go func() { // the client's frames; its end ends the session
		defer cancel()
		defer ss.sb.endAs(endClientGone, goneReason)
		for {
			typ, b, err := c.Read(ctx)
			if err != nil {
				if errors.Is(err, websocket.ErrMessageTooBig) {
					ss.sb.ended(endFrameError) // the library has closed with 1009
				}
				return
			}
			if typ == websocket.MessageText && !utf8.Valid(b) {
				ss.sb.ended(endFrameError)
				closed <- closing{code: websocket.StatusInvalidFramePayloadData}
				return
			}
			if _, code, err := ss.clientFrame(b); err != nil {
				ss.sb.ended(endOfCode(code, err))
				closed <- closing{websocket.StatusCode(code), truncate(err.Error(), 120)}
				return
			}
		}
	}()
	out := &wsSink{c: c, ctx: ctx, timeout: s.o.WriteTimeout, sb: ss.sb}
	reason, err := ss.pump(ctx, out)
	select {
	case cl := <-closed:
		_ = c.Close(cl.code, cl.reason)
		return
	default:
	}
	if err != nil || reason == "" || reason == goneReason {
		return
	}
	code := CloseRevoked
	switch {
	case reason == shutdownReason:
		code = websocket.StatusServiceRestart
	case endKind(ss.sb.endKind.Load()) == endTooManyCommands: // pings or pongs past the rate
		code = websocket.StatusPolicyViolation
	}
	_ = out.flush()
	_ = c.Close(code, truncate(reason, 120))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

type wsSink struct {
	frames
	c       *websocket.Conn
	ctx     context.Context
	timeout time.Duration
	sb      *sub
	pinging atomic.Bool
}

// frames buffers the JSON objects a WebSocket or TCP connection is sent:
// over WebSocket, one per line of a text frame; over TCP, each a frame
// of its own behind its length (4 bytes, big-endian).
type frames struct {
	buf         []byte
	lenPrefixed bool
}

type wsFrame struct {
	Type    string `json:"type"`
	Topic   string `json:"topic"`
	Cursor  string `json:"cursor,omitempty"`
	Data    string `json:"data,omitempty"`
	Receipt string `json:"receipt,omitempty"` // a group's message
	Attempt uint64 `json:"attempt,omitempty"`
	*Gap
}

// put buffers one object.
func (o *frames) put(obj []byte) {
	switch {
	case o.lenPrefixed:
		o.buf = binary.BigEndian.AppendUint32(o.buf, uint32(len(obj)))
	case len(o.buf) > 0:
		o.buf = append(o.buf, '\n')
	}
	o.buf = append(o.buf, obj...)
}

func (o *frames) add(f wsFrame) {
	b, _ := json.Marshal(f)
	o.put(b)
}

func (o *frames) ready(topic string, c Cursor) {
	o.add(wsFrame{Type: "ready", Topic: topic, Cursor: c.String()})
}

// wsLine is a message's line in a frame.
func wsLine(topic, epoch string, d *delivery) []byte {
	b, _ := json.Marshal(wsFrame{Type: "message", Topic: topic, Cursor: Cursor{Epoch: epoch, Seq: d.seq}.String(), Data: string(d.data),
		Receipt: d.receipt, Attempt: d.attempt})
	return b
}

func (o *frames) message(topic, epoch string, d *delivery) {
	line := d.ws
	if line == nil || d.epoch != epoch {
		line = wsLine(topic, epoch, d)
	}
	o.put(line)
}

func (o *frames) gap(topic string, g Gap) { o.add(wsFrame{Type: "gap", Topic: topic, Gap: &g}) }

func (o *frames) pending() int { return len(o.buf) }

func (o *wsSink) flush() error {
	if len(o.buf) == 0 {
		return nil
	}
	// No context deadline (the library would arm a timer per write): the
	// server's janitor closes the connection under a blocked write.
	err := o.sb.write(func() error { return o.c.Write(context.Background(), websocket.MessageText, o.buf) })
	o.buf = reuse(o.buf)
	return err
}

// ping sends a ping and, in a goroutine of its own (the writer goes on),
// waits for its pong within the write timeout, closing the connection
// without one: a half-open connection is found within the ping interval
// and that. One ping at a time.
func (o *wsSink) ping() error {
	if !o.pinging.CompareAndSwap(false, true) {
		return nil
	}
	o.sb.wrote.Store(time.Now().UnixNano()) // not asked again meanwhile
	o.sb.earned.Add(1)                      // its pong
	go func() {
		defer o.pinging.Store(false)
		ctx, cancel := context.WithTimeout(o.ctx, o.timeout)
		defer cancel()
		if err := o.c.Ping(ctx); err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				o.sb.ended(endPingTimeout)
			}
			_ = o.c.CloseNow()
		}
	}()
	return nil
}
