package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/push"
)

// The push TCP listener (push/tcp.go has the frames). A connection's
// first frame is its request: the edge serves it as a GET of its path
// with its headers through ServeHTTP — the same IP rules, canonical path,
// authentication, grants, admission and origin check as a WebSocket's —
// and the connection is handed to the push server, or gets an error frame
// and is closed.

// TCP handshake bounds: the time a connection has to complete TLS and
// send its connect frame, and how many may be doing so at once on one
// edge (past it a new connection is closed at once: a flood of silent
// connections holds no more than this many goroutines).
const (
	TCPHandshakeTimeout = 10 * time.Second
	MaxTCPHandshakes    = 1024
	maxConnectHeaders   = 64
	tcpErrorBody        = 4 << 10
)

// tcpDropped are headers a connect frame may not give: the framing and
// hop-by-hop ones mean nothing here, and the forwarding ones would let a
// client pose as another address (a TCP proxy cannot add them).
var tcpDropped = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true, "Upgrade": true,
	"Te": true, "Trailer": true, "Keep-Alive": true, "Proxy-Connection": true,
	"X-Forwarded-For": true, "X-Forwarded-Host": true, "X-Forwarded-Proto": true, "Forwarded": true, "X-Real-Ip": true,
	"Sec-Websocket-Key": true, "Sec-Websocket-Version": true, "Sec-Websocket-Protocol": true, "Sec-Websocket-Extensions": true,
}

// tcpConnect is a TCP client's first frame.
type tcpConnect struct {
	Type    string            `json:"type"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
}

// tcpHandshake is the ResponseWriter of a connect frame's request: a
// refusal is kept to be sent as an error frame; a subscription takes the
// connection (servePush). No HTTP caller can reach the edge with one.
type tcpHandshake struct {
	conn   net.Conn
	h      http.Header
	status int
	body   []byte
	taken  bool
}

func (t *tcpHandshake) Header() http.Header { return t.h }

func (t *tcpHandshake) WriteHeader(status int) {
	if t.status == 0 {
		t.status = status
	}
}

func (t *tcpHandshake) Write(b []byte) (int, error) {
	t.WriteHeader(http.StatusOK)
	if n := tcpErrorBody - len(t.body); n > 0 {
		t.body = append(t.body, b[:min(n, len(b))]...)
	}
	return len(b), nil
}

// tcpError is the frame of a refusal: the JSON error body an HTTP caller
// would get, with its status and Retry-After.
type tcpError struct {
	Type       string   `json:"type"`
	Status     int      `json:"status"`
	Code       bus.Code `json:"code"`
	Message    string   `json:"message"`
	RequestID  string   `json:"request_id,omitempty"`
	RetryAfter int64    `json:"retry_after,omitempty"`
}

// ServeTCP serves push subscriptions on ln until it is closed (its error
// is then net.ErrClosed). ln may be a TLS listener: a client certificate
// it requested is the request's, for auth mtls.
func (e *Edge) ServeTCP(ln net.Listener) error {
	handshakes := make(chan struct{}, MaxTCPHandshakes)
	var wait time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors and the like: as http.Server does,
			// wait a little and go on.
			wait = min(max(2*wait, 5*time.Millisecond), time.Second)
			e.log.Warn("push tcp accept", "err", err, "retry_in", wait)
			time.Sleep(wait)
			continue
		}
		wait = 0
		select {
		case handshakes <- struct{}{}:
		default:
			_ = c.Close()
			continue
		}
		go func() {
			defer func() { <-handshakes }()
			e.handshakeTCP(c)
		}()
	}
}

// handshakeTCP reads a connection's connect frame and serves it.
func (e *Edge) handshakeTCP(c net.Conn) {
	t := &tcpHandshake{conn: c, h: http.Header{}}
	defer func() {
		if !t.taken {
			_ = c.Close()
		}
	}()
	_ = c.SetDeadline(time.Now().Add(TCPHandshakeTimeout))
	ctx, cancel := context.WithTimeout(context.Background(), TCPHandshakeTimeout)
	defer cancel()
	var state *tls.ConnectionState
	if tc, ok := c.(*tls.Conn); ok {
		if err := tc.HandshakeContext(ctx); err != nil {
			return
		}
		st := tc.ConnectionState()
		state = &st
	}
	b, err := push.ReadFrame(c, push.MaxInboundFrame)
	if err != nil {
		if errors.Is(err, push.ErrFrameTooLarge) {
			t.refuse(bus.CodePayloadTooLarge, err.Error())
		}
		return
	}
	r, err := connectRequest(b, c, state)
	if err != nil {
		t.refuse(bus.CodeBadRequest, err.Error())
		return
	}
	e.ServeHTTP(t, r.WithContext(ctx)) // the session, once taken, has its own
	if !t.taken {
		t.send()
	}
}

// connectRequest is the request a connect frame asks for.
func connectRequest(b []byte, c net.Conn, state *tls.ConnectionState) (*http.Request, error) {
	var hello tcpConnect
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&hello); err != nil || dec.More() || hello.Type != "connect" {
		return nil, errors.New(`the first frame is {"type":"connect","path":"/_jetway/tcp/<topic>?…","headers":{…}}`)
	}
	if !strings.HasPrefix(hello.Path, BuiltinPrefix+"tcp/") {
		return nil, errors.New("a connect frame's path is /_jetway/tcp/<topic>, with its query")
	}
	u, err := url.ParseRequestURI(hello.Path)
	if err != nil {
		return nil, errors.New("a connect frame's path: " + err.Error())
	}
	if len(hello.Headers) > maxConnectHeaders {
		return nil, errors.New("a connect frame has at most " + strconv.Itoa(maxConnectHeaders) + " headers")
	}
	h := make(http.Header, len(hello.Headers))
	for k, v := range hello.Headers {
		if !httpguts.ValidHeaderFieldName(k) || !httpguts.ValidHeaderFieldValue(v) {
			return nil, errors.New("a connect frame's header " + strconv.Quote(k) + " is not a valid header")
		}
		k = http.CanonicalHeaderKey(k)
		if tcpDropped[k] {
			return nil, errors.New("a connect frame may not give the header " + k)
		}
		h[k] = []string{v}
	}
	return &http.Request{
		Method: http.MethodGet, URL: u, RequestURI: hello.Path,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: http.NoBody, Host: c.LocalAddr().String(),
		RemoteAddr: c.RemoteAddr().String(), TLS: state,
	}, nil
}

// refuse sends an error frame before any request was made of the frame.
func (t *tcpHandshake) refuse(code bus.Code, msg string) {
	writeError(t, code, msg, "")
	t.send()
}

// send writes the refusal ServeHTTP wrote as an error frame.
func (t *tcpHandshake) send() {
	f := tcpError{Type: "error", Status: t.status}
	_ = json.Unmarshal(t.body, &f) // writeError's body: code, message, request_id
	f.Type, f.Status = "error", t.status
	f.RetryAfter, _ = strconv.ParseInt(t.h.Get("Retry-After"), 10, 64)
	b, _ := json.Marshal(f)
	_ = t.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _ = t.conn.Write(push.AppendFrame(nil, b))
}
