package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
)

// GuardFraming wraps an edge listener so that a request whose framing is
// ambiguous is refused with 400: one with both a Content-Length and a
// Transfer-Encoding, or an HTTP/1.0 request with a Transfer-Encoding
// (RFC 9112 §6.1: faulty framing, the connection must close).
//
// Go's server drops the Content-Length of such a request before any handler
// can see it (and ignores Transfer-Encoding on HTTP/1.0), serving the
// request by a length a front proxy may not have used: the rest would reach
// the edge as a second request, smuggled. The guard reads each request's
// header block on the connection before the server does, numbers the
// blocks, and notes the first ambiguous one; the edge (Edge.ServeHTTP,
// through ConnContext) counts the requests it serves on the connection and
// answers that one 400 BAD_REQUEST, closing the connection.
//
// The guard keeps one invariant: its block n is exactly the bytes Go's
// server parses as request n of the connection, for every n up to the block
// at which the watch ends; the edge closes the connection after that one, so
// no later request is ever served unwatched. To keep it, the guard frames
// the stream as net/http's server does (conn.readRequest, textproto):
//   - after a request whose method is exactly POST, the server drops up to
//     four CR or LF bytes before the next request line; the guard passes
//     them on without counting them as a block (however the reads split
//     them);
//   - the request line is exactly the first line; the server refuses an
//     empty one, so a block starting with CR or LF is not followed;
//   - a header block ends at the first empty line (CRLF or bare LF);
//   - a body is exactly its Content-Length. A body the handler leaves
//     unread is discarded up to 256 KiB or the connection is closed, and
//     Expect: 100-continue with an unread body closes it too: either way
//     the next request starts where the guard expects it, or is never read.
//
// Where it cannot be sure it stops watching: a chunked body, a length it
// cannot parse or lengths that differ, a folded header line (obs-fold: the
// server joins it to the field before), a protocol other than HTTP/1.0 or
// HTTP/1.1 (such as "PRI * HTTP/2.0"). A block it hands over unchecked (an
// empty request line, one over the size limit, one the connection's end cut
// short) is one the server refuses itself; it is marked refused all the
// same, should the server ever serve it. After HTTP/1.0 without keep-alive,
// Connection: close or an upgrade the server or the edge closes after the
// response, so what follows is never served, whatever the guard makes of it;
// except an upgrade the edge takes (a WebSocket: upgradeConn), after which
// the bytes pass unwatched.
//
// Put the guard outermost, and set ConnContext and
// DisableGeneralOptionsHandler on the http.Server (the edge must see every
// request for its count to match the guard's). Unencrypted HTTP/2 (h2c
// with prior knowledge, http.Server.Protocols) may share the listener: its
// preface is not HTTP/1, so the guard stops watching such a connection,
// and its requests, framed by HTTP/2, are not counted.
//
// The watch costs one copy of the header bytes and no allocation per
// request; an idle connection keeps no more than a few KiB.
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

// framingVerdict counts r as the next request of its connection and says
// whether to refuse it (its header block had ambiguous framing) and whether
// to close the connection after it (the guard no longer watches the
// connection). A request from an unguarded listener gets false, false. A
// request over TLS under the guard gets its r.TLS, which the server, seeing
// only the guard, could not set.
func framingVerdict(r *http.Request) (refuse, closeAfter bool) {
	fc, _ := r.Context().Value(framingKey{}).(*framingConn)
	if fc == nil || r.ProtoMajor == 2 {
		return false, false
	}
	if r.TLS == nil {
		r.TLS = fc.tls
	}
	n := fc.served.Add(1)
	off := fc.offAt.Load()
	return n == fc.badAt.Load(), off != 0 && n >= off
}

// Watch states of a framingConn.
const (
	watchHeaders = iota // reading a header block: held back until complete
	watchBody           // passing a Content-Length body of left bytes
	watchOff            // no longer watching
)

// framingConn is a guarded connection. Read and the fields above the
// atomics are touched only by the server's reading goroutine (one at a
// time); the atomics are shared with the edge's handlers.
type framingConn struct {
	net.Conn
	max    int
	state  int
	left   int64  // body bytes still to pass (watchBody)
	skip   int    // stray CR/LF bytes the server drops before the next request line
	hdr    []byte // the header block read so far (watchHeaders)
	out    []byte // checked bytes; the server has read out[off:] yet
	off    int
	err    error                // a read error to return (once) when out is empty
	blocks int64                // header blocks handed to the server
	tls    *tls.ConnectionState // the TLS under the guard (ListenTLS), nil on a plain connection

	// onBlock, for tests, is called with each header block as it is
	// handed over (nil for one handed over unchecked).
	onBlock func(block []byte)

	// upgraded: the edge has taken the connection over (a WebSocket):
	// what follows the request is not HTTP, and passes unwatched.
	upgraded atomic.Bool

	badAt  atomic.Int64 // number of the ambiguous block; 0: none
	offAt  atomic.Int64 // number of the block after which the watch ended; 0: watching
	served atomic.Int64 // requests the edge has served (framingVerdict)
}

// Read is called by one goroutine at a time (the server's reader).
func (c *framingConn) Read(p []byte) (int, error) {
	for c.upgrade(); c.off == len(c.out); c.upgrade() {
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
		// Read into p itself: feed copies what it keeps, and what is
		// checked is copied back below.
		n, err := c.Conn.Read(p)
		c.feed(p[:n])
		c.err = err
		if err != nil && len(c.hdr) > 0 && !isTimeout(err) {
			// The connection ended inside a header block: hand over what
			// came, unchecked (the server refuses an unfinished request).
			// A timeout is different: the server uses a past deadline to
			// stop its background read, and reads on afterwards.
			c.unchecked(nil)
		}
	}
	n := copy(p, c.out[c.off:])
	c.off += n
	if c.off == len(c.out) {
		c.off = 0
		if cap(c.out) > keepBuf {
			c.out = nil
		} else {
			c.out = c.out[:0]
		}
	}
	return n, nil
}

// upgrade stops the watch once the edge has taken the connection over:
// frames the client sent at once, held as if a header block, are the
// WebSocket's.
func (c *framingConn) upgrade() {
	if c.state != watchOff && c.upgraded.Load() {
		c.state = watchOff
		c.out = append(c.out, c.hdr...)
		c.hdr = nil
	}
}

// isTimeout reports whether err is a timeout. Its own function, so that
// the net.Error errors.As needs on the heap is allocated only on an error.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// keepBuf is the most a connection keeps of a buffer between reads: an
// occasional big header block must not stay with every idle connection.
const keepBuf = 8 << 10

// stop ends the watch after the block being handed over (c.blocks).
func (c *framingConn) stop() {
	c.state = watchOff
	c.offAt.Store(c.blocks)
}

// unchecked hands over the block being read and rest without checking
// them, numbering the block, marking it refused and ending the watch. It is
// for a block the server refuses itself, so that if it ever served one the
// edge would refuse it.
func (c *framingConn) unchecked(rest []byte) {
	c.blocks++
	c.badAt.Store(c.blocks)
	c.stop()
	if c.onBlock != nil {
		c.onBlock(nil)
	}
	c.out = append(append(c.out, c.hdr...), rest...)
	c.hdr = nil
}

// feed takes bytes read from the connection in watchHeaders state and moves
// whatever has been checked to out.
func (c *framingConn) feed(b []byte) {
	for len(b) > 0 {
		if c.state != watchHeaders {
			c.out = append(c.out, b...)
			return
		}
		if len(c.hdr) == 0 {
			// Between requests. After a POST the server drops up to four
			// CR or LF bytes (what it peeks of them) before the request
			// line: pass them on, not as a block of their own.
			n := 0
			for n < c.skip && n < len(b) && (b[n] == '\r' || b[n] == '\n') {
				n++
			}
			c.out = append(c.out, b[:n]...)
			c.skip -= n
			if b = b[n:]; len(b) == 0 {
				return // more may follow in the next read
			}
			c.skip = 0
			if b[0] == '\r' || b[0] == '\n' {
				// An empty request line: the server refuses it and
				// closes the connection.
				c.unchecked(b)
				return
			}
		}
		start := len(c.hdr)
		c.hdr = append(c.hdr, b...)
		end := blockEnd(c.hdr, max(start-3, 0))
		if end < 0 {
			if len(c.hdr) > c.max { // the server answers 431 itself
				c.unchecked(nil)
			}
			return
		}
		block := c.hdr[:end]
		rest := b[len(b)-(len(c.hdr)-end):]
		c.blocks++
		if c.onBlock != nil {
			c.onBlock(block)
		}
		c.check(block)
		c.out = append(c.out, block...)
		if cap(c.hdr) > keepBuf {
			c.hdr = nil
		} else {
			c.hdr = c.hdr[:0]
		}
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

// check reads one request's header block (it starts with neither CR nor
// LF) and sets the watch state for what follows it.
func (c *framingConn) check(block []byte) {
	// The request line is exactly the first line, split as the server
	// splits it (parseRequestLine), with its line end taken off.
	line, rest, _ := bytes.Cut(block, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	method, target, ok1 := bytes.Cut(line, []byte(" "))
	_, proto, ok2 := bytes.Cut(target, []byte(" "))
	http10 := string(proto) == "HTTP/1.0"
	http1 := ok1 && ok2 && (http10 || string(proto) == "HTTP/1.1")
	if string(method) == "POST" {
		c.skip = 4
	}
	var cl []byte
	clCount, te, folded := 0, false, false
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
			folded = true // continues the field before it
			continue
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
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
		}
	}
	n, ok := parseLength(cl)
	switch {
	case te && (clCount != 0 || http10):
		c.badAt.Store(c.blocks)
		c.stop()
	case te, clCount < 0, clCount > 0 && !ok, folded, !http1:
		// Chunked (the edge closes after it), lengths the server refuses
		// or one too long to follow, a field the server joins across
		// lines, or a protocol not framed as HTTP/1.1: watch no further.
		c.stop()
	case clCount > 0 && n > 0:
		c.state, c.left = watchBody, n
	default:
		c.state = watchHeaders
	}
}

// parseLength parses a Content-Length value: decimal digits only, leading
// zeros allowed, at most 18 significant digits (more is refused as not
// followable). No allocation, unlike strconv on a converted string.
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	v = bytes.TrimLeft(v, "0")
	if len(v) > 18 {
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

// upgradeConn tells the framing guard of r's connection, if any, that the
// edge takes the connection over after this request (a WebSocket): what
// the client sends next is frames, not requests, and must pass as it
// comes. Should the upgrade fail instead, the connection closes after the
// refusal: no request after it is read unwatched.
func upgradeConn(w http.ResponseWriter, r *http.Request) {
	fc, _ := r.Context().Value(framingKey{}).(*framingConn)
	if fc == nil || r.ProtoMajor == 2 {
		return
	}
	w.Header().Set("Connection", "close") // a successful upgrade answers "Upgrade"
	fc.upgraded.Store(true)
}
