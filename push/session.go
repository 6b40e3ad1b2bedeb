package push

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// Subscriber is an authenticated client of a topic, as the edge hands it
// over: the edge has checked its credentials, grants and origin.
type Subscriber struct {
	Topic  *registry.Topic
	App    string
	Device string // "" : none
	// User is the subject of the token the client connected with ("" :
	// none): messages to that user of the app reach it. Expires, when
	// set, ends the connection when the token does.
	User    string
	Expires time.Time
	// Token: it connected with a token (its acks are not the app's, even
	// when the token names no user).
	Token bool
	// Refresh, for a token connection, checks a fresh token the client
	// sends over it (WebSocket, TCP) — the same app and user — and returns
	// its expiry, which becomes the connection's; an error is why not.
	Refresh func(token string) (time.Time, error)
	// Transport names it for operators ("sse", "ws").
	Transport string
	Start     Start
	// Check is asked with every registry snapshot (Server.Recheck); a
	// reason ends the connection with it.
	Check func(*registry.Snapshot) string
	// Release, when set, is called once the connection ends (Admit's).
	Release func()
	// Group, when set, makes the connection a member of the app's group
	// of that name (group.go): Start is not used. Prefetch is how many
	// unacked messages it holds at most (0: DefaultPrefetch).
	Group    string
	Prefetch int
}

// ackKey is where the subscriber's acks are kept.
func (c *Subscriber) ackKey() string {
	return ackKey(c.Topic.Store().Stream, c.Topic.Name, c.App, c.Device, c.User, c.Token)
}

// Session is a subscription opened and not yet served: its hub is live,
// its start resolved. Serve it with ServeSSE or ServeWS, which close it.
type Session struct {
	s      *Server
	topic  string
	store  bus.PushStore
	h      *hub
	sb     *sub
	epoch  string
	cursor uint64 // the last sequence delivered or passed
	pos    uint64 // the next ring entry to read
	resets uint64 // the hub's consumer resets when pos was set
	// caughtUp: every entry before pos is read (the last drain ended at
	// the ring's head).
	caughtUp bool
	// catchUp: read from the stream after cursor before live messages.
	catchUp bool
	gap     *Gap
	release func()      // nil: none
	ackKey  string      // where its acks are kept
	grp     *groupState // a group member's; nil: none
	refresh func(token string) (time.Time, error)
	// receipts are the messages of the write in progress whose
	// publishers asked for receipts (receipts.go); ttl their retention.
	receipts []*delivery
	ttl      string
	// unflushed counts the messages buffered since the last write: each
	// earns the client a command (limits.go).
	unflushed int
	cmds      cmdBucket
}

var errClosed = errors.New("the edge is shutting down")

// maxExpiry is the latest expiry a connection keeps (UnixNano's end).
var maxExpiry = time.Unix(0, math.MaxInt64)

// shutdownReason ends every connection of an edge that stops; goneReason
// is the transport's word that the client left (nothing is written).
const (
	shutdownReason = "the edge is shutting down; reconnect"
	goneReason     = "\x00the client left"
	expiredReason  = "the token expired; reconnect with a fresh one"
)

// Open joins a subscriber to its topic's hub and resolves where it starts.
// An error is the stream's or the bus's (the edge answers 503): nothing
// has been written.
func (s *Server) Open(ctx context.Context, c Subscriber) (*Session, error) {
	sb := newSub(c.App, c.Device)
	sb.check, sb.user, sb.group = c.Check, c.User, c.Group
	sb.topic, sb.transport, sb.since = c.Topic.Name, c.Transport, time.Now()
	if !c.Expires.IsZero() && c.Expires.Before(maxExpiry) {
		sb.expires.Store(c.Expires.UnixNano()) // later than 2262: never, in effect
	}
	store := c.Topic.Store()
	h, err := s.join(ctx, store, c.Topic.Name, sb)
	if err != nil {
		return nil, err
	}
	// Read after the join: every message the hub gets from here on has
	// an index at or above pos.
	ss := &Session{s: s, topic: c.Topic.Name, store: store, h: h, sb: sb, pos: h.head.Load(), resets: h.resets.Load(), caughtUp: true, release: c.Release,
		ackKey: c.ackKey(), refresh: c.Refresh, ttl: strconv.FormatInt(int64(c.Topic.MaxAge()/time.Second), 10) + "s",
		cmds: cmdBucket{tokens: float64(s.o.CommandBurst), at: time.Now()}}
	begin := func() error { return ss.begin(ctx, c.Topic, c.Start) }
	if c.Group != "" {
		begin = func() error { return ss.openGroup(ctx, c) }
	}
	if err := begin(); err != nil {
		s.leave(h, sb)
		return nil, err
	}
	// The client has everything up to its start: it may ack that before
	// the first write.
	sb.cursor.Store(ss.cursor)
	s.stats.conns.Add(1)
	return ss, nil
}

// close leaves the hub and gives back the connection's place. The count
// on Stats drops last: once it says a connection is gone, its place under
// the caps is free too (a client reconnecting on that word is admitted),
// and why it ended is counted.
func (ss *Session) close() {
	ss.s.leave(ss.h, ss.sb)
	if ss.release != nil {
		ss.release()
	}
	ss.s.countEnd(ss.sb)
	ss.s.stats.conns.Add(-1)
}

// begin resolves the start: live only (after the stream's last message
// now), or after a cursor the client gave — with a gap when the cursor is
// of another epoch, from the future, or older than what is kept. It runs
// after join: the state it reads is of a request sent after the hub was
// live, so nothing stored falls between the two.
func (ss *Session) begin(ctx context.Context, t *registry.Topic, start Start) error {
	st, err := ss.s.state(ctx, ss.store, time.Now())
	if err != nil {
		return err
	}
	ss.epoch = st.epoch
	if start.Acked {
		acked, ok, err := ss.s.loadAck(ctx, ss.ackKey)
		if err != nil {
			return err
		}
		start = Start{After: &acked}
		if !ok { // never acked: everything the stream keeps for it
			start = Start{From: &Cursor{}}
		}
	}
	var asked Cursor
	switch {
	case start.After != nil:
		asked = *start.After
	case start.From != nil:
		asked = *start.From
	default:
		ss.cursor = st.last // live: the hub has everything after
		return nil
	}
	ss.catchUp = true
	if asked.Epoch == "" {
		asked.Epoch = st.epoch
	}
	gap := func(reason string) {
		ss.gap = &Gap{Reason: reason, Asked: asked.String(), Resume: Cursor{Epoch: st.epoch, Seq: ss.cursor}.String()}
	}
	if asked.Epoch != st.epoch {
		ss.cursor = 0 // everything the stream of this epoch keeps
		gap(GapEpoch)
		return nil
	}
	after := asked.Seq
	if start.After == nil && after > 0 {
		after-- // from is inclusive
	}
	if after > st.last {
		ss.cursor = st.last
		ss.catchUp = false
		gap(GapFuture)
		return nil
	}
	ss.cursor = after
	switch {
	case start.From != nil && asked.Seq > 0 && asked.Seq < st.first:
		gap(GapExpired)
	case start.After != nil && after > 0 && t.ModeOrDefault() != registry.TopicLatestOnly:
		// The message the client has last is gone: so may be those after
		// it that it never got (a latest_only topic drops old values by
		// design, and says no gap for them).
		ok, err := ss.s.exists(ctx, ss.store, after)
		if err != nil {
			return err
		}
		if !ok {
			gap(GapExpired)
		}
	}
	return nil
}

// sink is a transport's writer: messages and gaps are buffered, flush
// writes them, each within the write timeout.
type sink interface {
	ready(topic string, c Cursor)
	// message buffers a message; d may be shared with other sessions
	// (read it, and its encodings through d.encoded).
	message(topic, epoch string, d *delivery)
	gap(topic string, g Gap)
	flush() error
	ping() error
	// pending is how many bytes are buffered.
	pending() int
}

// batchMax is how many messages go into one write, and batchBytes how
// many bytes one write holds before the next message.
const (
	batchMax   = 128
	batchBytes = 256 << 10
	// keepBuf is the largest write buffer a connection keeps between
	// writes; a larger one (a batch of big messages) goes back to the
	// heap, so an idle connection stays small.
	keepBuf = 16 << 10
)

// pump serves a session until its client leaves, its connection is
// ended (the reason is returned) or a write fails.
//
// Live messages come from the hub's ring, read from pos on. A session
// that finds an entry it needs gone (overwritten, evicted, or the
// consumer reset) catches up: it sets pos to the ring's head now —
// everything the hub gets from then on is read from the ring — and reads
// what the stream holds after its cursor, which covers everything before.
// The two overlap; emit drops what is at or below the cursor.
//
// The pump waits on two channels only — its wake and its kick — so that
// ten thousand idle connections cost ten thousand cheap waits: a message
// for it, a due ping (the server's janitor), the client leaving (its
// transport) and the edge stopping all come through them.
func (ss *Session) pump(ctx context.Context, out sink) (reason string, err error) {
	if ss.grp != nil {
		return ss.groupPump(ctx, out)
	}
	s := ss.s
	out.ready(ss.topic, Cursor{Epoch: ss.epoch, Seq: ss.cursor})
	if ss.gap != nil {
		out.gap(ss.topic, *ss.gap)
	}
	catchUp := ss.catchUp
	waitOver := false // a pull's wait is over: it answers with what there is
	for {
		// An end asked for (a revocation, a kick) goes before anything
		// more is written: a wake and a kick both ready would be a coin
		// toss in the select below, and a message published after the
		// revocation reached the edge must not reach the connection. A
		// pull's wait ending is no such end: what is there is collected
		// first (a pull with wait 0 answers at once, with what it finds).
		if r, ok := ss.sb.kicked(); ok {
			if r != waitReason {
				return r, nil
			}
			waitOver = true
		}
		if catchUp {
			// Marks of entries before here are the replay's to cover.
			ss.sb.next.Store(0)
			ss.pos, ss.resets = ss.h.head.Load(), ss.h.resets.Load()
			ss.caughtUp = true
			if reason, err := ss.replay(ctx, out); reason != "" || err != nil {
				return reason, err
			}
			catchUp = false
		}
		lag, more := ss.drain(out)
		if lag {
			s.stats.catchUps.Add(1)
			catchUp = true
			continue
		}
		if err := ss.flush(out); err != nil {
			return "", err
		}
		if ss.sb.pingDue.Swap(false) {
			if err := out.ping(); err != nil {
				ss.sb.ended(endClientGone)
				return "", err
			}
		}
		if more { // more in the ring: the loop's top looks whether to stop
			continue
		}
		if waitOver {
			return waitReason, nil
		}
		ss.sb.idle.Store(true) // everything for it is written: no lag until it is marked
		select {
		case <-ss.sb.wake:
		case r := <-ss.sb.kick:
			return r, nil
		}
		ss.sb.idle.Store(false)
	}
}

// drain writes the ring's entries for the subscriber from pos on, up to a
// batch. lag: an entry it needed is gone; more: the ring holds more.
//
// A subscriber of a busy topic that few messages are for (one device among
// thousands) would fall behind the ring between two of its own, and catch
// up from the stream for each. So drain starts where the hub says the
// first entry for it is (sub.next), when everything before pos has been
// read (caughtUp): past others' entries, or back to one whose mark came
// after the last look (its entries are dropped by sequence if seen).
func (ss *Session) drain(out sink) (lag, more bool) {
	h := ss.h
	next := ss.sb.next.Swap(0)
	switch head := h.head.Load(); {
	case next != 0 && (ss.caughtUp || next-1 < ss.pos):
		ss.pos = next - 1
	case next == 0 && ss.caughtUp:
		ss.pos = max(ss.pos, head) // nothing for it since the last look
	}
	defer func() { ss.caughtUp = !lag && !more }()
	var now time.Time // once a drain: the write follows at once
	for n := 0; ; {
		// Read before head: every entry up to last is below head, so
		// the subscriber has looked at it when it is at head (for the
		// lag operators see; a mark landing meanwhile is read next).
		last := h.last.Load()
		if ss.pos >= h.head.Load() {
			ss.sb.seen.Store(last)
			return false, false
		}
		if n >= batchMax || out.pending() >= batchBytes {
			return false, true
		}
		d, ok := h.entry(ss.pos)
		if !ok || h.resets.Load() != ss.resets {
			return true, false
		}
		ss.pos++
		if ss.sb.wants(d) && d.seq > ss.cursor {
			ss.cursor = d.seq
			ss.s.stats.delivered.Add(1)
			if now.IsZero() {
				now = time.Now()
			}
			ss.s.latency.observe(now.Sub(d.at))
			ss.message(out, d)
			n++
		}
	}
}

// replay writes what the stream holds for the subscriber after its
// cursor, a batch per write. Between batches it heeds the connection's
// end (a revocation, the edge stopping, the client gone).
func (ss *Session) replay(ctx context.Context, out sink) (reason string, err error) {
	for {
		batch, last, more, err := ss.s.fetch(ctx, ss.store, ss.h.prefix, ss.cursor+1)
		if err != nil {
			return "", err
		}
		for _, d := range batch {
			if d.seq <= ss.cursor {
				continue
			}
			if ss.sb.wants(d) {
				ss.s.stats.delivered.Add(1)
				ss.s.stats.replayed.Add(1)
				ss.message(out, d)
			}
			ss.cursor = d.seq
			if out.pending() >= batchBytes {
				if err := ss.flush(out); err != nil {
					return "", err
				}
			}
		}
		ss.cursor = max(ss.cursor, last)
		if !more {
			return "", nil
		}
		if err := ss.flush(out); err != nil {
			return "", err
		}
		select {
		case r := <-ss.sb.kick:
			return r, nil
		case <-ss.s.stop:
			ss.sb.ended(endShutdown)
			return shutdownReason, nil
		case <-ctx.Done():
			return "", ctx.Err()
		default:
		}
	}
}

// flush writes what out holds. The subscriber's cursor says the last
// sequence written before the write starts: a client may ack a message
// as soon as it reads it.
func (ss *Session) flush(out sink) error {
	ss.sb.cursor.Store(ss.cursor)
	if ss.unflushed > 0 { // the client may ack each (limits.go)
		ss.sb.earned.Add(int64(ss.unflushed))
		ss.unflushed = 0
	}
	if err := out.flush(); err != nil {
		ss.sb.ended(endClientGone) // or the janitor's write timeout, noted first
		return err
	}
	ss.sendReceipts() // written: their receipts
	return nil
}

// message buffers d for the client, and notes it for a receipt.
func (ss *Session) message(out sink, d *delivery) {
	out.message(ss.topic, ss.epoch, d)
	ss.unflushed++
	if d.receiptFor != "" {
		ss.receipts = append(ss.receipts, d)
	}
}

// reuse empties a written buffer, keeping it only when small.
func reuse(b []byte) []byte {
	if cap(b) > keepBuf {
		return nil
	}
	return b[:0]
}
