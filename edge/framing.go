package edge

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
)

// GuardFraming wraps an edge listener so that a request with both a
// Content-Length and a Transfer-Encoding can be refused with 400.
//
// Go's server drops the Content-Length of such a request before any handler
// can see it and serves the request by its chunked body. A front proxy that
// believed the Content-Length instead would forward what follows the chunked
// body as a second request: request smuggling. RFC 9112 §6.1 says such a
// message "ought to be handled as an error". The guard reads each request's
// header block on the connection before the server does, and when it carries
// both headers marks the connection; the edge (Edge.ServeHTTP, through
// ConnContext) then answers that request 400 BAD_REQUEST and closes.
//
// The guard follows request framing only as far as it needs to: a
// Content-Length body is counted and the next header block watched again; a
// chunked body, an upgrade, CONNECT or an oversized header block ends the
// watch for that connection. That is safe because the edge closes every
// connection after a chunked request, and the server itself refuses the
// others. Put it outermost, and set ConnContext on the http.Server.
//
// The watch costs one copy of the header bytes, no allocation per request.
func GuardFraming(l net.Listener, maxHeaderBytes int) net.Listener {
	if maxHeaderBytes <= 0 {
		maxHeaderBytes = http.DefaultMaxHeaderBytes
	}
	return &framingListener{Listener: l, max: maxHeaderBytes + 4096}
}

type framingListener struct {
	net.Listener
	max int
}

func (l *framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framingConn{Conn: c, max: l.max}, nil
}

// ConnContext is for http.Server.ConnContext: it lets the edge find the
// connection's framing guard.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framingConn); ok {
		return context.WithValue(ctx, framingKey{}, fc)
	}
	return ctx
}

type framingKey struct{}

// conflictingFraming reports whether r was read from a guarded connection
// whose chunked request also had a Content-Length. The guard stops watching
// at the first chunked request, so a mark can only belong to it.
func conflictingFraming(r *http.Request) bool {
	fc, _ := r.Context().Value(framingKey{}).(*framingConn)
	return fc != nil && fc.conflict.Load()
}

// Watch states of a framingConn.
const (
	watchHeaders = iota // reading a header block: held back until complete
	watchBody           // passing a Content-Length body of left bytes
	watchOff            // no longer watching
)

type framingConn struct {
	net.Conn
	max      int
	state    int
	left     int64  // body bytes still to pass (watchBody)
	hdr      []byte // the header block read so far (watchHeaders)
	out      []byte // checked bytes; the server has read out[off:] yet
	off      int
	scratch  []byte
	err      error // a read error to return (once) when out is empty
	conflict atomic.Bool
}

// Read is called by one goroutine at a time (the server's reader).
func (c *framingConn) Read(p []byte) (int, error) {
	for c.off == len(c.out) {
		if err := c.err; err != nil {
			// Returned once: the server aborts its background read with
			// a past deadline and then reads on.
			c.err = nil
			return 0, err
		}
		switch c.state {
		case watchOff:
			return c.Conn.Read(p)
		case watchBody:
			n, err := c.Conn.Read(p)
			if int64(n) <= c.left {
				c.left -= int64(n)
				if c.left == 0 {
					c.state = watchHeaders
				}
				return n, err
			}
			// The read went past the body: the rest starts the next
			// header block, held back until it is checked.
			body := int(c.left)
			c.left, c.state, c.err = 0, watchHeaders, err
			c.feed(p[body:n])
			return body, nil
		}
		if c.scratch == nil {
			c.scratch = make([]byte, 4096)
		}
		n, err := c.Conn.Read(c.scratch)
		c.feed(c.scratch[:n])
		c.err = err
		var ne net.Error
		if err != nil && len(c.hdr) > 0 && !(errors.As(err, &ne) && ne.Timeout()) {
			// The connection ended inside a header block: hand over what
			// came, unchecked (the server refuses an unfinished request).
			// A timeout is different: the server uses a past deadline to
			// stop its background read, and reads on afterwards.
			c.state = watchOff
			c.out, c.hdr = append(c.out, c.hdr...), c.hdr[:0]
		}
	}
	n := copy(p, c.out[c.off:])
	c.off += n
	if c.off == len(c.out) {
		c.off = 0
		if cap(c.out) > 64<<10 {
			c.out = nil // let a big block go
		} else {
			c.out = c.out[:0]
		}
	}
	return n, nil
}

// feed takes bytes read from the connection in watchHeaders state and moves
// whatever has been checked to out.
func (c *framingConn) feed(b []byte) {
	for len(b) > 0 {
		if c.state != watchHeaders {
			c.pass(b)
			return
		}
		start := len(c.hdr)
		c.hdr = append(c.hdr, b...)
		end := blockEnd(c.hdr, max(start-3, 0))
		if end < 0 {
			if len(c.hdr) > c.max { // the server answers 431 itself
				c.state = watchOff
				c.out, c.hdr = append(c.out, c.hdr...), c.hdr[:0]
			}
			return
		}
		block := c.hdr[:end]
		rest := b[len(b)-(len(c.hdr)-end):]
		c.check(block)
		c.out = append(c.out, block...)
		c.hdr = c.hdr[:0]
		if c.state == watchBody {
			// Pass as much of the rest as belongs to the body.
			n := int(min(int64(len(rest)), c.left))
			c.out = append(c.out, rest[:n]...)
			c.left -= int64(n)
			rest = rest[n:]
			if c.left == 0 {
				c.state = watchHeaders
			}
		}
		b = rest
	}
}

func (c *framingConn) pass(b []byte) { c.out = append(c.out, b...) }

// blockEnd returns the length of the header block at the start of b (up to
// and including its empty line; Go's server accepts bare LF line ends too),
// or -1 when it is not complete. from is where to start looking.
func blockEnd(b []byte, from int) int {
	for i := from; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		switch {
		case i >= 1 && b[i-1] == '\n':
			return i + 1
		case i >= 2 && b[i-1] == '\r' && b[i-2] == '\n':
			return i + 1
		}
	}
	return -1
}

// check reads one request's header block and sets the watch state for what
// follows it.
func (c *framingConn) check(block []byte) {
	line, rest, _ := bytes.Cut(block, []byte("\n"))
	if bytes.HasPrefix(line, []byte("CONNECT ")) {
		c.state = watchOff
		return
	}
	var cl []byte
	clCount, te, upgrade := 0, false, false
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		name, value, ok := bytes.Cut(bytes.TrimRight(line, "\r"), []byte(":"))
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			v := bytes.TrimSpace(value)
			if clCount > 0 && !bytes.Equal(v, cl) {
				clCount = -1 // differing lengths: the server refuses them
			} else if clCount >= 0 {
				clCount++
			}
			cl = v
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			te = true
		case bytes.EqualFold(name, []byte("Upgrade")):
			upgrade = true
		}
	}
	n, ok := parseLength(cl)
	switch {
	case te && clCount != 0:
		c.conflict.Store(true)
		c.state = watchOff
	case te, upgrade, clCount < 0:
		c.state = watchOff
	case clCount > 0 && !ok:
		c.state = watchOff // the server refuses a bad length and closes
	case clCount > 0 && n > 0:
		c.state, c.left = watchBody, n
	default:
		c.state = watchHeaders
	}
}

// parseLength parses a Content-Length value as Go's server does: decimal
// digits only, at most 18 of them (no allocation, unlike strconv on a
// converted string).
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, d := range v {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int64(d-'0')
	}
	return n, true
}
