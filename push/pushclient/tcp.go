package pushclient

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"time"
)

// maxFrame bounds a frame from the edge: a batch of messages is many
// frames, a frame one message (1 MiB of text, escaped).
const maxFrame = 16 << 20

// tcpFrame is a frame from the edge: a WebSocket line's object, a close's
// code, or a refusal's status.
type tcpFrame struct {
	wsFrame
	Code       json.RawMessage `json:"code"` // a close's number, a refusal's word
	Status     int             `json:"status"`
	Message    string          `json:"message"`
	RetryAfter int64           `json:"retry_after"`
}

// dialTCP connects to an edge's push TCP listener (tcp:// or tls://),
// sends the connect frame and reads the first answer: a refusal is an
// *HTTPError as over HTTP.
func dialTCP(ctx context.Context, u *url.URL, o Options) (*Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "tcp":
	case "tls":
		cfg := &tls.Config{}
		if o.TLSConfig != nil {
			cfg = o.TLSConfig.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			return nil, err
		}
		c = tc
	default:
		_ = c.Close()
		return nil, fmt.Errorf("a TCP edge is tcp://host:port or tls://host:port, not %s://", u.Scheme)
	}
	headers := map[string]string{}
	for k, v := range o.Header {
		if len(v) > 0 {
			headers[k] = v[0]
		}
	}
	path := u.Path
	if u.RawQuery != "" {
		path += "?" + u.RawQuery
	}
	hello, _ := json.Marshal(map[string]any{"type": "connect", "path": path, "headers": headers})
	tc := &tcpConn{c: c, rd: bufio.NewReaderSize(c, 64<<10), topic: o.Topic}
	first, err := func() (Event, error) {
		stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
		defer stop()
		if _, err := c.Write(frame(hello)); err != nil {
			return Event{}, err
		}
		return tc.read()
	}()
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	tc.pending = &first
	return &Conn{next: tc.next, close: c.Close, ack: tc.ack, send: tc.send}, nil
}

type tcpConn struct {
	c       net.Conn
	rd      *bufio.Reader
	topic   string
	pending *Event     // the first, read by dialTCP
	wmu     sync.Mutex // writes: a pong from the reader, an ack from anyone
}

func (t *tcpConn) write(b []byte) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	_, err := t.c.Write(b)
	return err
}

func (t *tcpConn) ack(ctx context.Context, cursor string) error { return t.send(ctx, ackFrame(cursor)) }

func (t *tcpConn) send(ctx context.Context, obj []byte) error {
	stop := context.AfterFunc(ctx, func() { _ = t.c.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	return t.write(frame(obj))
}

func frame(obj []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(obj))), obj...)
}

func (t *tcpConn) next(ctx context.Context) (Event, error) {
	if ev := t.pending; ev != nil {
		t.pending = nil
		return *ev, nil
	}
	if err := ctx.Err(); err != nil {
		return Event{}, err
	}
	stop := context.AfterFunc(ctx, func() { _ = t.c.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	ev, err := t.read()
	if err != nil && ctx.Err() != nil {
		return Event{}, ctx.Err()
	}
	return ev, err
}

// read returns the next event, answering pings on the way.
func (t *tcpConn) read() (Event, error) {
	for {
		var n [4]byte
		if _, err := io.ReadFull(t.rd, n[:]); err != nil {
			return Event{}, err
		}
		size := binary.BigEndian.Uint32(n[:])
		if size > maxFrame {
			return Event{}, fmt.Errorf("a frame of %d bytes from the edge, over %d", size, maxFrame)
		}
		b := make([]byte, size)
		if _, err := io.ReadFull(t.rd, b); err != nil {
			return Event{}, err
		}
		var f tcpFrame
		if err := json.Unmarshal(b, &f); err != nil {
			return Event{}, fmt.Errorf("a frame that is not JSON: %w", err)
		}
		switch f.Type {
		case "ping":
			if err := t.write(frame([]byte(`{"type":"pong"}`))); err != nil {
				return Event{}, err
			}
			continue
		case "error":
			var code string
			_ = json.Unmarshal(f.Code, &code)
			return Event{}, &HTTPError{Status: f.Status, Code: code, Message: f.Message, RetryAfter: time.Duration(f.RetryAfter) * time.Second}
		case "close":
			var code int
			_ = json.Unmarshal(f.Code, &code)
			return Event{Type: "close", Topic: t.topic, Reason: f.Reason}, &CloseError{Code: code, Reason: f.Reason}
		}
		if f.Topic == "" {
			f.Topic = t.topic
		}
		return f.event(), nil
	}
}
