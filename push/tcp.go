package push

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// The TCP transport: for clients that are not browsers (a partner's
// server, a device) and want neither HTTP's framing nor WebSocket's. Both
// ways, a connection is a sequence of frames, each a 4-byte big-endian
// length and that many bytes of one JSON object:
//
//	client → {"type":"connect","path":"/_jetway/tcp/orders?after=E:S","headers":{"X-Api-Key":"…"}}
//	edge   → {"type":"ready","topic":"orders","cursor":"E:S"}
//	edge   → {"type":"message","topic":"orders","cursor":"E:S","data":"…"}
//	edge   → {"type":"ping"}                         client → {"type":"pong"}
//	client → {"type":"ack","cursor":"E:S"}           (the last message handled)
//	client → {"type":"ack"|"nack","receipt":R}       (a group member's message)
//	client → {"type":"token","token":"<JWT>"}        (a fresh token, same app and user)
//	edge   → {"type":"close","code":1012,"reason":"…"}
//
// The objects are the WebSocket transport's (one per frame rather than one
// per line). The edge reads the connect frame, serves it as the GET of
// its path with its headers (edge.ServeTCP), and refuses with
// {"type":"error","status":401,"code":"UNAUTHENTICATED","message":"…"}.

// Close codes of the TCP transport, as WebSocket's where one fits.
const (
	CodeServiceRestart = 1012 // the edge is shutting down: reconnect, to any edge
	CodeTooLarge       = 1009 // a client frame over MaxInboundFrame
	CodeInvalid        = 1007 // a client frame that is not a JSON object
	CodePolicy         = 1008 // a bad ack (another epoch, past what was sent), a token refused, too many commands
	CodeRevoked        = int(CloseRevoked)
)

// ErrFrameTooLarge is a frame longer than the reader takes.
var ErrFrameTooLarge = errors.New("push: frame too large")

// ReadFrame reads one frame of at most limit bytes: ErrFrameTooLarge past
// it (nothing more of it is read), io.EOF at a clean end before a frame.
func ReadFrame(r io.Reader, limit int) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if uint64(size) > uint64(limit) {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrFrameTooLarge, size, limit)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// AppendFrame appends obj as a frame.
func AppendFrame(dst, obj []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(obj)))
	return append(dst, obj...)
}

// tcpClose is the last frame of a connection the edge ends.
type tcpClose struct {
	Type   string `json:"type"`
	Code   int    `json:"code"`
	Reason string `json:"reason,omitempty"`
}

var pingFrame = AppendFrame(nil, []byte(`{"type":"ping"}`))

// ServeTCP serves a session over a connection whose connect frame the
// edge has read and admitted; it owns c from here and closes it, and the
// session. Like ServeWS it returns at once: the session goes on in a
// goroutine of its own.
func (s *Server) ServeTCP(c net.Conn, ss *Session) {
	_ = c.SetDeadline(time.Time{}) // the handshake's
	go s.serveTCP(c, ss)
}

func (s *Server) serveTCP(c net.Conn, ss *Session) {
	defer ss.close()
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	abort := func() { _ = c.Close() } // a write blocked past the timeout
	ss.sb.abort.Store(&abort)
	out := &tcpSink{frames: frames{lenPrefixed: true}, c: c, ctx: ctx, timeout: s.o.WriteTimeout, sb: ss.sb, pong: make(chan struct{}, 1)}
	closed := make(chan tcpClose, 1)
	go func() { // the client's frames; its end ends the session
		defer cancel()
		defer ss.sb.endAs(endClientGone, goneReason)
		for {
			b, err := ReadFrame(c, MaxInboundFrame)
			if errors.Is(err, ErrFrameTooLarge) {
				ss.sb.ended(endFrameError)
				closed <- tcpClose{Code: CodeTooLarge, Reason: fmt.Sprintf("a client frame is at most %d bytes", MaxInboundFrame)}
				return
			}
			if err != nil {
				return
			}
			typ, code, err := ss.clientFrame(b)
			if err != nil {
				ss.sb.ended(endOfCode(code, err))
				closed <- tcpClose{Code: code, Reason: truncate(err.Error(), 120)}
				return
			}
			if typ == "pong" {
				select {
				case out.pong <- struct{}{}:
				default:
				}
			}
		}
	}()
	reason, err := ss.pump(ctx, out)
	var last tcpClose
	select {
	case last = <-closed:
	default:
		if err != nil || reason == "" || reason == goneReason {
			return
		}
		last = tcpClose{Code: CodeRevoked, Reason: truncate(reason, 120)}
		if reason == shutdownReason {
			last.Code = CodeServiceRestart
		}
	}
	last.Type = "close"
	out.put(jsonText(last))
	_ = out.flush()
}

type tcpSink struct {
	frames
	c       net.Conn
	ctx     context.Context
	timeout time.Duration
	sb      *sub
	pinging atomic.Bool
	pong    chan struct{}
}

func (o *tcpSink) flush() error {
	if len(o.buf) == 0 {
		return nil
	}
	// No deadline per write: the server's janitor closes the connection
	// under a blocked write (abort).
	err := o.sb.write(func() error { _, err := o.c.Write(o.buf); return err })
	o.buf = reuse(o.buf)
	return err
}

// ping sends a ping frame and, in a goroutine of its own, waits for the
// client's pong within the write timeout, closing the connection without
// one: a half-open connection is found within the ping interval and that.
// One ping at a time.
func (o *tcpSink) ping() error {
	if !o.pinging.CompareAndSwap(false, true) {
		return nil
	}
	select { // a pong the client sent unasked
	case <-o.pong:
	default:
	}
	o.buf = append(o.buf, pingFrame...)
	o.sb.earned.Add(1) // its pong
	if err := o.flush(); err != nil {
		o.pinging.Store(false)
		return err
	}
	go func() {
		defer o.pinging.Store(false)
		t := time.NewTimer(o.timeout)
		defer t.Stop()
		select {
		case <-o.pong:
		case <-o.ctx.Done():
		case <-t.C:
			o.sb.ended(endPingTimeout)
			_ = o.c.Close()
		}
	}()
	return nil
}
