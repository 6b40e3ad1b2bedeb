// Package pushclient is a Go client of Jetway's push endpoints: it
// subscribes to a topic over Server-Sent Events or WebSocket, and a
// Subscription reconnects by itself, resuming after the last cursor it
// got, so that its reader sees every message once, in order, or a gap.
//
//	sub := pushclient.Subscribe(pushclient.Options{
//		Edge: "http://127.0.0.1:8080", Topic: "orders",
//		Header: http.Header{"X-Api-Key": {key}},
//	})
//	defer sub.Close()
//	for {
//		ev, err := sub.Next(ctx)
//		...
//	}
//
// It imports no Jetway package: clients of the gateway may use it alone.
package pushclient

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Options say what to subscribe to and how.
type Options struct {
	// Edge is the edge's base URL (http://host:port); for the TCP
	// transport its push TCP listener, tcp://host:port or tls://host:port.
	Edge  string
	Topic string
	// Transport is "sse" (default), "ws" or "tcp".
	Transport string
	// TLSConfig for a tls:// edge; nil: the system's roots, the edge's
	// host name.
	TLSConfig *tls.Config
	// Header carries the credentials (X-Api-Key, Authorization) and an
	// Origin if any.
	Header http.Header
	// Device, when set, also receives the messages sent to this device of
	// the app.
	Device string
	// After is the cursor of the last message the client has, or "ack":
	// after the last it acknowledged (everything kept when none); From
	// the first it wants. Neither: live messages only.
	After, From string
	// HTTPClient for SSE; nil: one without a timeout (a stream is long).
	HTTPClient *http.Client
	// Group, when set, makes the connection (ws, tcp) or pull a member
	// of the app's group of that name: each message goes to one member,
	// which acks it by its Receipt (AckReceipt, Nack; AckGroup over
	// HTTP). Prefetch is how many unacked messages it holds (0: 10).
	Group    string
	Prefetch int
}

// Event is one thing a subscription tells its reader.
type Event struct {
	// Type: "ready" (subscribed; Cursor is where it starts), "message",
	// "gap" (Gap says what could not be delivered) or "close" (the edge
	// ended the connection: Reason).
	Type   string
	Topic  string
	Cursor string
	Seq    uint64
	Data   string
	Gap    *Gap
	Reason string
	// A group's message: the receipt it is acked by, and which delivery
	// of it this is (2 and up: delivered before, not acked in time).
	Receipt string
	Attempt uint64
}

// Gap is a gap the edge reported.
type Gap struct {
	Reason string `json:"reason"`
	Asked  string `json:"asked"`
	Resume string `json:"resume"`
}

// HTTPError is the edge's refusal of a subscription (401, 403, 404, 503).
type HTTPError struct {
	Status  int
	Code    string
	Message string
	// RetryAfter is the edge's Retry-After (a 503 OVERLOADED or a 429
	// past a cap): when to try again; 0: none said.
	RetryAfter time.Duration
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("the edge refused: %d %s: %s", e.Status, e.Code, e.Message)
}

// Conn is one connection to an edge.
type Conn struct {
	next  func(ctx context.Context) (Event, error)
	close func() error
	ack   func(ctx context.Context, cursor string) error
	send  func(ctx context.Context, frame []byte) error // nil: SSE, which sends none
}

// AckReceipt acks one message of a group connection by its receipt.
func (c *Conn) AckReceipt(ctx context.Context, receipt string) error {
	return c.frame(ctx, map[string]string{"type": "ack", "receipt": receipt})
}

// Nack gives one message of a group connection back: it is delivered
// again (to any member) after delay (0: at once).
func (c *Conn) Nack(ctx context.Context, receipt string, delay time.Duration) error {
	f := map[string]string{"type": "nack", "receipt": receipt}
	if delay > 0 {
		f["delay"] = delay.String()
	}
	return c.frame(ctx, f)
}

// Refresh hands a token connection a fresh token (of the same app and
// user) before its token expires: the connection then ends at the fresh
// one's expiry. A token the edge does not take closes the connection
// (1008, with why).
func (c *Conn) Refresh(ctx context.Context, token string) error {
	return c.frame(ctx, map[string]string{"type": "token", "token": token})
}

func (c *Conn) frame(ctx context.Context, f map[string]string) error {
	if c.send == nil {
		return errors.New("an SSE connection sends no frames: ack over HTTP")
	}
	b, _ := json.Marshal(f)
	return c.send(ctx, b)
}

// Ack acknowledges every message up to cursor (the last one handled): a
// connection that starts with After "ack", on any edge, goes on after
// it. Over WebSocket and TCP it is a frame of the connection (the edge
// stores it within 100 ms; a bad one closes the connection with 1008),
// over SSE a POST /_jetway/ack. Safe to call while Next runs.
func (c *Conn) Ack(ctx context.Context, cursor string) error { return c.ack(ctx, cursor) }

// Next returns the next event; an error ends the connection.
func (c *Conn) Next(ctx context.Context) (Event, error) { return c.next(ctx) }

// Close ends the connection.
func (c *Conn) Close() error { return c.close() }

// Dial opens one connection.
func Dial(ctx context.Context, o Options) (*Conn, error) {
	u, err := url.Parse(strings.TrimSuffix(o.Edge, "/"))
	if err != nil {
		return nil, fmt.Errorf("edge URL: %w", err)
	}
	q := url.Values{}
	setQuery(q, o)
	transport := o.Transport
	if transport == "" {
		transport = "sse"
	}
	u.Path += "/_jetway/" + transport + "/" + o.Topic
	u.RawQuery = q.Encode()
	switch transport {
	case "sse":
		return dialSSE(ctx, u.String(), o)
	case "ws":
		return dialWS(ctx, u.String(), o)
	case "tcp":
		return dialTCP(ctx, u, o)
	}
	return nil, fmt.Errorf("transport %q: sse, ws or tcp", transport)
}

func refusal(resp *http.Response, body []byte) error {
	var e struct{ Code, Message string }
	_ = json.Unmarshal(body, &e)
	he := &HTTPError{Status: resp.StatusCode, Code: e.Code, Message: e.Message}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		he.RetryAfter = time.Duration(s) * time.Second
	}
	return he
}

func dialSSE(ctx context.Context, u string, o Options) (*Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	for k, v := range o.Header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "text/event-stream")
	hc := o.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	resp, err := hc.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		cancel()
		return nil, refusal(resp, b)
	}
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	events := make(chan Event, 64)
	errc := make(chan error, 1)
	go func() {
		defer close(events)
		errc <- readSSE(rd, o.Topic, events)
	}()
	var once sync.Once
	closeFn := func() error { once.Do(func() { cancel(); _ = resp.Body.Close() }); return nil }
	return &Conn{next: func(ctx context.Context) (Event, error) {
		select {
		case ev, ok := <-events:
			if !ok {
				return Event{}, <-errc
			}
			return ev, nil
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}, close: closeFn, ack: func(ctx context.Context, cursor string) error {
		_, err := Ack(ctx, o, cursor)
		return err
	}}, nil
}

// readSSE parses an event stream until it ends.
func readSSE(rd *bufio.Reader, topic string, out chan<- Event) error {
	var name, id string
	var data []string
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			if data == nil {
				name, id = "", ""
				continue
			}
			ev := Event{Type: "message", Topic: topic, Cursor: id, Data: strings.Join(data, "\n")}
			if name != "" {
				ev.Type = name
			}
			if err := fillSSE(&ev); err != nil {
				return err
			}
			out <- ev
			name, id, data = "", "", nil
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			name = value
		case "id":
			id = value
		case "data":
			data = append(data, value)
		}
	}
}

// fillSSE reads the JSON of the events that carry it.
func fillSSE(ev *Event) error {
	switch ev.Type {
	case "message":
		ev.Seq = seqOf(ev.Cursor)
		return nil
	case "gap":
		ev.Gap = &Gap{}
		return json.Unmarshal([]byte(ev.Data), ev.Gap)
	case "ready", "close":
		var v struct{ Topic, Cursor, Reason string }
		if err := json.Unmarshal([]byte(ev.Data), &v); err != nil {
			return err
		}
		ev.Cursor, ev.Reason, ev.Data = v.Cursor, v.Reason, ""
	}
	return nil
}

func seqOf(cursor string) uint64 {
	_, s, _ := strings.Cut(cursor, ":")
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

type wsFrame struct {
	Type    string `json:"type"`
	Topic   string `json:"topic"`
	Cursor  string `json:"cursor"`
	Data    string `json:"data"`
	Reason  string `json:"reason"`
	Asked   string `json:"asked"`
	Resume  string `json:"resume"`
	Receipt string `json:"receipt"`
	Attempt uint64 `json:"attempt"`
}

// event is the frame's event.
func (f *wsFrame) event() Event {
	ev := Event{Type: f.Type, Topic: f.Topic, Cursor: f.Cursor, Data: f.Data, Reason: f.Reason, Receipt: f.Receipt, Attempt: f.Attempt}
	if f.Type == "message" {
		ev.Seq = seqOf(f.Cursor)
	}
	if f.Type == "gap" {
		ev.Gap = &Gap{Reason: f.Reason, Asked: f.Asked, Resume: f.Resume}
	}
	return ev
}

func dialWS(ctx context.Context, u string, o Options) (*Conn, error) {
	u = "ws" + strings.TrimPrefix(u, "http")
	c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: o.Header, HTTPClient: o.HTTPClient})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			var b []byte
			if resp.Body != nil {
				b, _ = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			}
			return nil, refusal(resp, b)
		}
		return nil, err
	}
	c.SetReadLimit(16 << 20) // a frame holds at most 256 KiB and one message (1 MiB of text, escaped)
	var pending []Event
	next := func(ctx context.Context) (Event, error) {
		for len(pending) == 0 {
			_, b, err := c.Read(ctx)
			if err != nil {
				if st := websocket.CloseStatus(err); st != -1 {
					var ce websocket.CloseError
					errors.As(err, &ce)
					return Event{Type: "close", Topic: o.Topic, Reason: ce.Reason}, &CloseError{Code: int(st), Reason: ce.Reason}
				}
				return Event{}, err
			}
			for _, line := range bytes.Split(b, []byte("\n")) {
				var f wsFrame
				if err := json.Unmarshal(line, &f); err != nil {
					return Event{}, fmt.Errorf("a frame that is not JSON: %w", err)
				}
				pending = append(pending, f.event())
			}
		}
		ev := pending[0]
		pending = pending[1:]
		return ev, nil
	}
	send := func(ctx context.Context, b []byte) error { return c.Write(ctx, websocket.MessageText, b) }
	ack := func(ctx context.Context, cursor string) error { return send(ctx, ackFrame(cursor)) }
	return &Conn{next: next, close: func() error { return c.Close(websocket.StatusNormalClosure, "") }, ack: ack, send: send}, nil
}

// CloseError is a WebSocket (or TCP) close from the edge: 1012 to reconnect (the
// edge is shutting down), 4001 revoked, 1009 a frame too large.
type CloseError struct {
	Code   int
	Reason string
}

func (e *CloseError) Error() string {
	return fmt.Sprintf("closed by the edge: %d %s", e.Code, e.Reason)
}

// Subscription is a subscription that reconnects by itself: after a
// connection ends it dials again (backing off up to 5s), resuming after
// the last message it returned, and drops a message it has returned
// before. A refusal (401, 403, 404) or a revoked close ends it.
type Subscription struct {
	o    Options
	conn *Conn
	last string // cursor of the last message returned
	seq  uint64
	wait time.Duration
}

// Subscribe starts a subscription; the first connection is made by Next.
func Subscribe(o Options) *Subscription {
	return &Subscription{o: o, last: o.After}
}

// Cursor is the cursor of the last message returned.
func (s *Subscription) Cursor() string { return s.last }

// Next returns the next message or gap, reconnecting as needed. It
// returns ready and close events too, for the reader's information.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	for {
		if s.conn == nil {
			o := s.o
			if s.last != "" && o.Group == "" { // a group goes on where the group is
				o.After, o.From = s.last, ""
			}
			c, err := Dial(ctx, o)
			if err != nil {
				var he *HTTPError
				if errors.As(err, &he) && he.Status != http.StatusServiceUnavailable {
					return Event{}, err
				}
				var after time.Duration
				if he != nil {
					after = he.RetryAfter
				}
				if err := s.backoff(ctx, after); err != nil {
					return Event{}, err
				}
				continue
			}
			s.conn, s.wait = c, 0
		}
		ev, err := s.conn.Next(ctx)
		if err != nil {
			_ = s.conn.Close()
			s.conn = nil
			var ce *CloseError
			if errors.As(err, &ce) && ce.Code == 4001 {
				return ev, err
			}
			if ctx.Err() != nil {
				return Event{}, ctx.Err()
			}
			if ev.Type == "close" {
				return ev, nil
			}
			continue
		}
		switch ev.Type {
		case "message":
			if ev.Seq != 0 && ev.Seq <= s.seq && sameEpoch(ev.Cursor, s.last) && s.o.Group == "" {
				continue // had it (a group's messages come again when not acked: not dropped)
			}
			s.last, s.seq = ev.Cursor, ev.Seq
		case "gap":
			if ev.Gap != nil && ev.Gap.Resume != "" {
				s.last, s.seq = ev.Gap.Resume, seqOf(ev.Gap.Resume)
			}
		case "ready":
			if s.last == "" {
				// Live from here: a reconnect must not lose what is
				// published meanwhile.
				s.last, s.seq = ev.Cursor, seqOf(ev.Cursor)
			}
		case "close":
			_ = s.conn.Close()
			s.conn = nil
		}
		return ev, nil
	}
}

func sameEpoch(a, b string) bool {
	ea, _, _ := strings.Cut(a, ":")
	eb, _, _ := strings.Cut(b, ":")
	return ea == eb
}

// backoff waits before the next dial: doubling from 100ms to 5s, and at
// least the edge's Retry-After, spread over up to twice that so that the
// clients a storm refused together do not all come back together.
func (s *Subscription) backoff(ctx context.Context, retryAfter time.Duration) error {
	s.wait = min(max(s.wait*2, 100*time.Millisecond), 5*time.Second)
	wait := s.wait
	if retryAfter > 0 {
		wait = max(wait, retryAfter+rand.N(retryAfter))
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}

// Ack acknowledges every message up to cursor over the connection, or
// over HTTP between connections (SSE and WebSocket subscriptions). Call
// it from the goroutine that calls Next (the one that handled the
// message).
func (s *Subscription) Ack(ctx context.Context, cursor string) error {
	if s.conn != nil {
		err := s.conn.Ack(ctx, cursor)
		if err == nil || !s.overHTTP() {
			return err
		}
		// The edge ended the connection under the messages still read
		// from it: over HTTP, then.
	}
	_, err := Ack(ctx, s.o, cursor)
	return err
}

// overHTTP reports whether the subscription's edge takes HTTP requests
// (not a TCP listener).
func (s *Subscription) overHTTP() bool {
	return strings.HasPrefix(s.o.Edge, "http://") || strings.HasPrefix(s.o.Edge, "https://")
}

// AckReceipt acks one message of a group subscription by its receipt,
// over the connection, or over HTTP between connections.
func (s *Subscription) AckReceipt(ctx context.Context, receipt string) error {
	if s.conn != nil {
		err := s.conn.AckReceipt(ctx, receipt)
		if err == nil || !s.overHTTP() {
			return err
		}
	}
	return AckGroup(ctx, s.o, []string{receipt}, nil, 0)
}

// Close ends the subscription.
func (s *Subscription) Close() error {
	if s.conn != nil {
		return s.conn.Close()
	}
	return nil
}
