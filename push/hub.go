package push

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// hub follows one topic on this edge with one ordered consumer. Its
// messages go into a ring that every subscriber of the topic reads at its
// own pace, and the subscribers a message is addressed to are woken. No
// subscriber has a queue of its own: an idle connection costs a position
// and a wake channel, and a burst costs one ring entry per message, not one
// per message and subscriber. A subscriber that falls behind the ring's
// oldest entry catches up from the stream.
type hub struct {
	s      *Server
	key    string // in Server.hubs: the stream and the topic
	store  bus.PushStore
	topic  string
	prefix string

	// The ring: entry i is in ring[i%len(ring)] while it is kept. Only the
	// consumer's callback writes it (one at a time); head is the index of
	// the next entry, and entries below tail are gone (evicted to keep the
	// ring within its bytes).
	ring  []atomic.Pointer[delivery]
	epoch string // of the stream when the hub started: its entries' wire forms carry it
	head  atomic.Uint64
	tail  uint64 // the consumer's own
	bytes int    // the consumer's own: the data the ring holds

	mu    sync.RWMutex
	subs  map[*sub]struct{}
	refs  int         // subscribers joined, under Server.mu
	timer *time.Timer // the linger after the last left; under Server.mu
	cc    jetstream.ConsumeContext
	// resets counts the consumer's errors: a subscriber that sees it
	// change catches up from the stream, whatever the ring says.
	resets atomic.Uint64
	// last is the sequence of the newest message the hub got.
	last atomic.Uint64
}

// sub is one subscriber as its hub sees it: its address and wake, and
// what the server's janitor watches of its connection.
type sub struct {
	app, device string
	// For jetway push connections: what it follows, over what, since
	// when, and the cursor of its last write.
	topic, transport string
	since            time.Time
	cursor           atomic.Uint64
	user             string        // the subject of the token it connected with; "": none
	group            string        // a group member's group (its messages come from the group's consumer, not the hub)
	expires          atomic.Int64  // unix ns when its token expires (the janitor ends it); 0: never
	wake             chan struct{} // capacity 1: a message for it is in the ring, or a ping is due
	kick             chan string   // capacity 1: the reason the connection must end
	// seen is the newest sequence of the topic its writer has looked at
	// and found nothing more for it up to (session.go, drain): its lag is
	// the topic's newest beyond max(cursor, seen).
	seen atomic.Uint64
	// idle: its writer waits, having written everything for it in the
	// ring; with no mark (next), nothing for it is pending.
	idle atomic.Bool
	// next is 1 + the ring index of the first entry for it since its
	// writer last took next (0: none), so that a writer woken now and
	// then on a busy topic skips the entries of others rather than
	// falling behind the ring (session.go, drain).
	next atomic.Uint64
	// check says why the subscriber may no longer stay ("" : it may).
	check func(*registry.Snapshot) string

	// writing is when the write in progress began (unix ns; 0: none),
	// wrote when the last one ended; pingDue asks the writer for a ping.
	// The janitor closes a connection whose write has blocked past the
	// write timeout (abort), and pings one idle for the ping interval: a
	// timer per server rather than one per connection and write.
	writing, wrote atomic.Int64
	pingDue        atomic.Bool
	abort          atomic.Pointer[func()] // closes the connection under a blocked write; nil: none

	// endKind is why the connection ends (an endKind; 0: not known yet),
	// the first cause noted (limits.go).
	endKind atomic.Int32
	// earned counts the commands its client has earned by the messages
	// and pings written to it, not yet taken into its bucket (limits.go).
	earned atomic.Int64
}

// write runs one write of the subscriber's connection under the
// janitor's watch.
func (sb *sub) write(f func() error) error {
	sb.writing.Store(time.Now().UnixNano())
	err := f()
	now := time.Now().UnixNano()
	sb.writing.Store(0)
	sb.wrote.Store(now)
	return err
}

func newSub(app, device string) *sub {
	sb := &sub{app: app, device: device, wake: make(chan struct{}, 1), kick: make(chan string, 1)}
	sb.wrote.Store(time.Now().UnixNano()) // the first ping a ping interval from now
	return sb
}

// wants reports whether a message is addressed to the subscriber.
func (sb *sub) wants(d *delivery) bool {
	if sb.group != "" {
		return false
	}
	switch d.kind {
	case kindAll:
		return true
	case kindApp:
		return d.app == sb.app
	case kindDev:
		return d.app == sb.app && d.id == sb.device && sb.device != ""
	case kindUser:
		return d.app == sb.app && d.id == sb.user && sb.user != ""
	}
	return false
}

// poke wakes the subscriber's writer without blocking.
func (sb *sub) poke() {
	select {
	case sb.wake <- struct{}{}:
	default:
	}
}

// end asks the subscriber's connection to close, once.
func (sb *sub) end(reason string) {
	select {
	case sb.kick <- reason:
	default:
	}
}

// kicked takes an end asked for, without waiting.
func (sb *sub) kicked() (reason string, ok bool) {
	select {
	case r := <-sb.kick:
		return r, true
	default:
		return "", false
	}
}

// entry returns ring entry i, or false when it is gone (overwritten or
// evicted): the reader has fallen behind.
func (h *hub) entry(i uint64) (*delivery, bool) {
	d := h.ring[i%uint64(len(h.ring))].Load()
	return d, d != nil && d.idx == i
}

// join adds a subscriber to its topic's hub, starting the hub (its
// ordered consumer, from the stream's next message) when there is none,
// and counts the connection (Close waits for it). The hub is live when
// join returns: every message stored after that enters the ring at or
// after the head the caller reads next, and wakes sb if it is for it.
func (s *Server) join(ctx context.Context, p bus.PushStore, topic string, sb *sub) (*hub, error) {
	key := p.Stream + " " + topic
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	h := s.hubs[key]
	if h == nil {
		// Started under the lock: a second subscriber of the topic
		// waits for the first's consumer rather than making its own.
		var err error
		if h, err = s.startHub(ctx, p, topic); err != nil {
			s.mu.Unlock()
			return nil, err
		}
		s.hubs[key] = h
	}
	h.refs++
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	s.conns.Add(1) // under the lock that Close takes before it waits
	// In the hub under s.mu too: Close, which takes s.mu first, either
	// refused this join or finds the subscriber there to end it.
	h.mu.Lock()
	h.subs[sb] = struct{}{}
	h.mu.Unlock()
	s.mu.Unlock()
	return h, nil
}

// leave removes a subscriber; the hub stops after the linger once it has
// none.
func (s *Server) leave(h *hub, sb *sub) {
	h.mu.Lock()
	delete(h.subs, sb)
	h.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns.Done()
	h.refs--
	if h.refs > 0 || s.hubs[h.key] != h {
		return
	}
	h.timer = time.AfterFunc(s.o.Linger, func() {
		s.mu.Lock()
		if h.refs > 0 || s.hubs[h.key] != h {
			s.mu.Unlock()
			return
		}
		delete(s.hubs, h.key)
		s.mu.Unlock()
		h.shut()
	})
}

// startHub makes a topic's ordered consumer. It starts at the stream's
// next sequence, fixed now, so that a reset of the consumer before its
// first message (a reconnect) still starts there.
func (s *Server) startHub(ctx context.Context, p bus.PushStore, topic string) (*hub, error) {
	st, err := s.state(ctx, p, time.Now())
	if err != nil {
		return nil, err
	}
	h := &hub{s: s, key: p.Stream + " " + topic, store: p, topic: topic, prefix: p.TopicPrefix(topic), subs: map[*sub]struct{}{},
		ring: make([]atomic.Pointer[delivery], s.o.RingLen), epoch: st.epoch}
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	cons, err := s.js.OrderedConsumer(ctx, p.Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{h.prefix + ">"},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    st.last + 1,
	})
	if err != nil {
		return nil, fmt.Errorf("following topic %s: %w", topic, err)
	}
	h.cc, err = cons.Consume(h.deliver, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		s.log.Warn("push consumer", "topic", topic, "err", err)
		// Whatever the consumer may have missed meanwhile, each
		// subscriber reads from the stream.
		h.allLagging()
	}))
	if err != nil {
		return nil, fmt.Errorf("following topic %s: %w", topic, err)
	}
	return h, nil
}

// deliver puts one message into the ring and wakes the subscribers it is
// addressed to.
func (h *hub) deliver(m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		return
	}
	d := &delivery{seq: md.Sequence.Stream, data: m.Data(), at: md.Timestamp, receiptFor: receiptFor(m.Headers())}
	var ok bool
	if d.kind, d.app, d.id, ok = parseSubject(m.Subject(), h.prefix); !ok {
		return
	}
	// Its wire forms, once for every session of the hub: they count in
	// the ring's bytes, so the bound holds whatever the data's escaping.
	d.epoch = h.epoch
	d.ws, d.sse = wsLine(h.topic, h.epoch, d), sseEvent(h.epoch, d)
	n := uint64(len(h.ring))
	d.idx = h.head.Load()
	// Make room: the entry it overwrites, and the oldest until the ring's
	// bytes are within the bound (a reader there has fallen behind).
	if d.idx >= n && h.tail <= d.idx-n {
		h.evict()
	}
	h.bytes += d.size()
	for h.bytes > h.s.o.RingBytes && h.tail < d.idx {
		h.evict()
	}
	h.ring[d.idx%n].Store(d)
	h.head.Store(d.idx + 1)
	h.last.Store(d.seq)
	h.mu.RLock()
	for sb := range h.subs {
		if sb.wants(d) {
			// The first entry for it since its writer last looked: the
			// writer goes straight there past others' entries.
			sb.next.CompareAndSwap(0, d.idx+1)
			sb.poke()
		}
	}
	h.mu.RUnlock()
}

// evict drops the ring's oldest entry.
func (h *hub) evict() {
	slot := &h.ring[h.tail%uint64(len(h.ring))]
	if d := slot.Load(); d != nil && d.idx == h.tail {
		h.bytes -= d.size()
		slot.Store(nil)
	}
	h.tail++
}

// allLagging wakes every subscriber after the consumer may have missed
// messages (a reset): each finds a hole in the ring's sequences it cannot
// see, so it catches up from the stream.
func (h *hub) allLagging() {
	h.resets.Add(1)
	h.mu.RLock()
	for sb := range h.subs {
		sb.poke()
	}
	h.mu.RUnlock()
}

// abortWriters closes the connections of the hub's subscribers whose
// write began longer ago than grace: blocked on a client that does not
// read (a write that is just ending must not lose its connection's close
// frame).
func (h *hub) abortWriters(grace time.Duration) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	since := time.Now().Add(-grace).UnixNano()
	for sb := range h.subs {
		if w := sb.writing.Load(); w != 0 && w < since {
			if abort := sb.abort.Load(); abort != nil {
				(*abort)()
			}
		}
	}
}

// shut stops the hub's consumer and ends its subscribers.
func (h *hub) shut() {
	if h.cc != nil {
		h.cc.Stop()
	}
	h.mu.RLock()
	for sb := range h.subs {
		sb.endAs(endShutdown, shutdownReason)
	}
	h.mu.RUnlock()
}

// Conn is one push connection of this edge, for operators.
type Conn struct {
	Topic     string    `json:"topic"`
	App       string    `json:"app"`
	Device    string    `json:"device,omitempty"`
	User      string    `json:"user,omitempty"`
	Transport string    `json:"transport"`
	Since     time.Time `json:"since"`
	// Seq is the sequence of the last message written to it (or passed);
	// Lag how many sequences its topic's newest message is ahead of what
	// it has been written or passed (0 when nothing for it waits).
	Seq uint64 `json:"seq"`
	Lag uint64 `json:"lag"`
}

// Connections lists this edge's push connections, of app when given (""
// : all), at most limit of them (0: all), the oldest first.
func (s *Server) Connections(app string, limit int) []Conn {
	s.mu.Lock()
	hubs := make([]*hub, 0, len(s.hubs))
	for _, h := range s.hubs {
		hubs = append(hubs, h)
	}
	s.mu.Unlock()
	var out []Conn
	for _, h := range hubs {
		last := h.last.Load()
		h.mu.RLock()
		for sb := range h.subs {
			if app != "" && sb.app != app {
				continue
			}
			c := Conn{Topic: sb.topic, App: sb.app, Device: sb.device, User: sb.user, Transport: sb.transport, Since: sb.since, Seq: sb.cursor.Load(), Lag: sb.lag(last)}
			out = append(out, c)
		}
		h.mu.RUnlock()
	}
	slices.SortFunc(out, func(a, b Conn) int { return a.Since.Compare(b.Since) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// lag is how many sequences the topic's newest, last, is ahead of what
// the subscriber has been written or passed: 0 when its writer waits with
// nothing for it in the ring (the others' messages are not its lag). A
// group member's is 0 (its messages are the group consumer's, not the
// topic's in order).
func (sb *sub) lag(last uint64) uint64 {
	if sb.group != "" || sb.idle.Load() && sb.next.Load() == 0 {
		return 0
	}
	if at := max(sb.cursor.Load(), sb.seen.Load()); last > at {
		return last - at
	}
	return 0
}

// maxLags returns the most any subscriber of each followed topic is behind
// its newest message (lag), by topic: read when metrics are scraped, from
// what the writers note anyway.
func (s *Server) maxLags() map[string]uint64 {
	s.mu.Lock()
	hubs := make([]*hub, 0, len(s.hubs))
	for _, h := range s.hubs {
		hubs = append(hubs, h)
	}
	s.mu.Unlock()
	out := make(map[string]uint64, len(hubs))
	for _, h := range hubs {
		last := h.last.Load()
		m := out[h.topic] // a topic changing mode has two hubs a while
		h.mu.RLock()
		for sb := range h.subs {
			m = max(m, sb.lag(last))
		}
		h.mu.RUnlock()
		out[h.topic] = m
	}
	return out
}

// Kick ends the connections of app (and of topic, when given) on this
// edge with reason, and says how many. Clients may come back: to keep an
// app out, disable it (every edge ends its connections then).
func (s *Server) Kick(app, topic, reason string) int {
	n := 0
	for _, sb := range s.subscribers() {
		if sb.app == app && (topic == "" || sb.topic == topic) {
			sb.endAs(endKicked, reason)
			n++
		}
	}
	return n
}

// subscribers returns every subscriber of every hub, copied out.
func (s *Server) subscribers() []*sub {
	s.mu.Lock()
	hubs := make([]*hub, 0, len(s.hubs))
	for _, h := range s.hubs {
		hubs = append(hubs, h)
	}
	s.mu.Unlock()
	var subs []*sub
	for _, h := range hubs {
		h.mu.RLock()
		for sb := range h.subs {
			subs = append(subs, sb)
		}
		h.mu.RUnlock()
	}
	return subs
}

// janitor closes the connections whose write has blocked past the write
// timeout, and asks those idle for the ping interval for a ping, once a
// second, until the server closes.
func (s *Server) janitor() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			n := now.UnixNano()
			for _, sb := range s.subscribers() {
				if w := sb.writing.Load(); w != 0 && n-w > int64(s.o.WriteTimeout) {
					s.stats.writeTimeouts.Add(1)
					sb.ended(endWriteTimeout)
					if abort := sb.abort.Load(); abort != nil {
						(*abort)()
					}
					continue
				}
				if exp := sb.expires.Load(); exp != 0 && n >= exp {
					sb.endAs(endExpired, expiredReason)
					continue
				}
				if n-sb.wrote.Load() >= int64(s.o.Ping) {
					sb.pingDue.Store(true)
					sb.poke()
				}
			}
		}
	}
}

// Recheck asks every subscriber whether it may stay under a new registry
// snapshot, and ends those that may not with their reason (a disabled
// app, a rotated key, a deleted topic or grant). The edge calls it with
// every snapshot, so a revocation reaches connections as soon as it
// reaches the edge.
func (s *Server) Recheck(snap *registry.Snapshot) {
	// Copied out: the checks run without the lock the hubs' deliveries
	// take.
	for _, sb := range s.subscribers() {
		if sb.check == nil {
			continue
		}
		if reason := sb.check(snap); reason != "" {
			sb.endAs(endRevoked, reason)
		}
	}
}
