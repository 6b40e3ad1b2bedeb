package push

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// Group consumption, for an app's back end rather than its users' devices:
// the clients of one app that connect with group=NAME (a name the topic's
// groups list) share one durable JetStream consumer, so that each message
// of the topic for the app — to everyone, or to the app — goes to one of
// them. A client acks or nacks each message by its receipt; a message not
// acked within the topic's ack_wait is delivered again, to any member;
// past max_deliver deliveries it becomes a dead letter (a record in the
// push stream, kind "dlq", for the operator) and is not delivered again.
//
// A member connection holds at most prefetch unacked messages: it takes
// the next only when it has acked (or nacked) one, or one's ack wait is
// over. A member that leaves gives its unacked messages back at once
// (nack), so another member gets them without waiting.
//
// The consumer is made (or updated to the topic's settings) by the edge
// a member connects to, and starts with the messages published after it
// is first made. Its name is "g" and 32 hex digits of the topic, app and
// group; its description names them.

// Group bounds: the unacked messages a member connection holds (default
// and most), and the most a group has out at once.
const (
	DefaultPrefetch    = 10
	MaxPrefetch        = 100
	groupMaxAckPending = 10000
)

// groupState is a member connection's part of its group.
type groupState struct {
	topic      *registry.Topic
	app, group string
	name       string // the consumer's
	prefetch   int
	pull       bool

	s        *Server
	released chan struct{} // capacity 1: the member holds fewer than prefetch now

	mu   sync.Mutex
	held map[string]time.Time // receipt → when the server delivers it again
}

// GroupConsumer is the durable consumer name of an app's group of a topic.
func GroupConsumer(topic, app, group string) string {
	h := sha256.Sum256([]byte(topic + "\x00" + app + "\x00" + group))
	return "g" + hex.EncodeToString(h[:16])
}

// openGroup makes (or updates) the group's consumer.
func (ss *Session) openGroup(ctx context.Context, c Subscriber) error {
	t := c.Topic
	if !t.HasGroup(c.Group) {
		return fmt.Errorf("%w: topic %s has no group %q", ErrBadGroup, t.Name, c.Group)
	}
	st, err := ss.s.state(ctx, ss.store, time.Time{})
	if err != nil {
		return err
	}
	ss.epoch = st.epoch
	name := GroupConsumer(t.Name, c.App, c.Group)
	if err := ss.s.groupConsumer(ctx, ss.store, t, c.App, c.Group, name); err != nil {
		return err
	}
	prefetch := c.Prefetch
	if prefetch <= 0 || prefetch > MaxPrefetch {
		prefetch = DefaultPrefetch
	}
	g := &groupState{s: ss.s, topic: t, app: c.App, group: c.Group, name: name, prefetch: prefetch,
		released: make(chan struct{}, 1), held: map[string]time.Time{}}
	ss.grp = g
	return nil
}

// groupConsumer makes the group's consumer, or updates it to the topic's
// settings: once per member connection (a JetStream API call), so that a
// consumer deleted by an operator is made again by the next member rather
// than followed by a handle of one that is gone (its pulls would find no
// responder, and no heartbeat would ever be missed).
func (s *Server) groupConsumer(ctx context.Context, store bus.PushStore, t *registry.Topic, app, group, name string) error {
	prefix := store.TopicPrefix(t.Name)
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	// A read first: a consumer there with the topic's settings is used as
	// it is (an update, even to the same settings, is a write that a pull
	// right after it may find the consumer in the middle of).
	if c, err := s.js.Consumer(ctx, store.Stream, name); err == nil && c.CachedInfo().Config.AckWait == t.GroupAckWait() {
		return nil
	}
	_, err := s.js.CreateOrUpdateConsumer(ctx, store.Stream, jetstream.ConsumerConfig{
		Durable:        name,
		Description:    fmt.Sprintf("Jetway group %q of app %q on topic %q", group, app, t.Name),
		FilterSubjects: []string{prefix + kindAll + ".>", prefix + kindApp + "." + bus.PushToken(app) + ".>"},
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        t.GroupAckWait(),
		MaxDeliver:     -1, // the edge counts, and writes the dead letter
		MaxAckPending:  groupMaxAckPending,
		DeliverPolicy:  jetstream.DeliverNewPolicy,
		// A group nobody has used for the longest retention is forgotten
		// (what it had not taken is gone by then): abandoned names do not
		// keep the stream's consumers for ever.
		InactiveThreshold: registry.MaxTopicMaxAge,
		Metadata:          map[string]string{"jetway_topic": t.Name, "jetway_app": app, "jetway_group": group},
	})
	if err != nil {
		return fmt.Errorf("opening group %s's consumer: %w", group, err)
	}
	return nil
}

// ErrBadGroup is a group a topic does not have, or a group subscription
// over a transport that cannot ack.
var ErrBadGroup = errors.New("bad group")

// groupPump serves a member connection until its client leaves, its
// connection is ended or a write fails. It pulls from the group's consumer
// exactly as many messages as the member may take (its credit: prefetch
// less what it holds unacked), no more: a member never sits on messages
// another could have, and what it is sent is what it was given.
func (ss *Session) groupPump(ctx context.Context, out sink) (reason string, err error) {
	g, sb := ss.grp, ss.sb
	out.ready(ss.topic, Cursor{Epoch: ss.epoch})
	defer ss.s.groupGiveBack(g)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if r, ok := sb.kicked(); ok { // as in pump: an end goes first
			return r, nil
		}
		if err := ss.flush(out); err != nil {
			return "", err
		}
		if k := g.credit(); k > 0 {
			reason, err := ss.groupFetch(ctx, out, tick.C, k, min(k, 4)*groupMsgBytes, groupPullWait)
			if err != nil || reason != "" {
				return reason, err
			}
			continue
		}
		select { // holding all it may: until it acks one, or one's wait is over
		case <-g.released:
		case <-sb.wake:
			if sb.pingDue.Swap(false) {
				if err := out.ping(); err != nil {
					sb.ended(endClientGone)
					return "", err
				}
			}
		case r := <-sb.kick:
			return r, nil
		case now := <-tick.C:
			g.expire(now)
		}
	}
}

// Group pulls: how long a member's pull waits at the server (then it is
// made again), and the bytes a message may take (the stream's largest, so
// that a pull's byte budget never refuses one).
const (
	groupPullWait  = 15 * time.Second
	groupMsgBytes  = registry.MaxPushMessage + 64<<10
	groupPullBytes = 4 << 20               // a group pull's answer holds at most this (and at least one message)
	groupPullGrace = 50 * time.Millisecond // the least a group pull waits for its first message
)

// groupMsg is a message a group pull brought: its subject, its ack
// subject (the receipt after "$JS.ACK."), which delivery it is.
type groupMsg struct {
	subject, reply string
	data           []byte
	seq, delivered uint64
}

// groupFetch sends one pull request for up to batch messages and maxBytes
// to the group's consumer — waiting up to wait for them, or not at all
// (wait 0) — and delivers each as it comes, flushing what it has whenever
// no more is at hand. It ends when the request is done; with the kick's
// reason, or ctx's error, when those come first, giving back (nack) what
// came and was not delivered. A member's pings and expiries go on
// meanwhile.
func (ss *Session) groupFetch(ctx context.Context, out sink, tick <-chan time.Time, batch, maxBytes int, wait time.Duration) (reason string, err error) {
	g, sb, s := ss.grp, ss.sb, ss.s
	ch := make(chan *nats.Msg, batch+8)
	inbox := s.nc.NewInbox()
	sub, err := s.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return "", fmt.Errorf("pulling group %s: %w", g.group, err)
	}
	giveBack := func() {
		_ = sub.Unsubscribe()
		for {
			select {
			case m := <-ch:
				if m.Header.Get("Status") == "" && m.Reply != "" {
					_ = s.nc.Publish(m.Reply, nakBody(0))
				}
			default:
				return
			}
		}
	}
	defer giveBack()
	req := map[string]any{"batch": batch, "max_bytes": maxBytes}
	if wait > 0 {
		req["expires"] = int64(wait)
	} else {
		req["no_wait"] = true
	}
	b, _ := json.Marshal(req)
	if err := s.nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+ss.store.Stream+"."+g.name, inbox, b); err != nil {
		return "", fmt.Errorf("pulling group %s: %w", g.group, err)
	}
	deadline := time.NewTimer(wait + s.o.RequestTimeout) // the server's end of the request, or ours
	defer deadline.Stop()
	for got := 0; got < batch; {
		select {
		case m := <-ch:
			switch status := m.Header.Get("Status"); status {
			case "":
				got++
				ss.groupDeliver(ctx, out, groupMsgOf(m))
				if len(ch) == 0 && !g.pull { // a pull's answer is written once, at its end
					if err := ss.flush(out); err != nil {
						return "", err
					}
				}
			case "100": // a heartbeat
			case "404", "408": // nothing now; the wait is over
				return "", nil
			case "409":
				if d := m.Header.Get("Description"); strings.Contains(d, "Consumer Deleted") || strings.Contains(d, "Consumer is push based") {
					return "", fmt.Errorf("pulling group %s: %s", g.group, d)
				}
				// The batch's bytes, or too many pulls waiting at the
				// server (MaxWaiting): the next pull, in a moment, not in
				// a tight loop.
				select {
				case r := <-sb.kick:
					return r, nil
				case <-ctx.Done():
					return "", ctx.Err()
				case <-time.After(250 * time.Millisecond):
				}
				return "", nil
			default:
				return "", fmt.Errorf("pulling group %s: %s %s", g.group, status, m.Header.Get("Description"))
			}
		case r := <-sb.kick:
			return r, nil
		case <-sb.wake:
			if sb.pingDue.Swap(false) {
				if err := out.ping(); err != nil {
					sb.ended(endClientGone)
					return "", err
				}
			}
		case now := <-tick:
			g.expire(now)
		case <-ctx.Done():
			return "", ctx.Err()
		case <-deadline.C:
			return "", nil
		}
	}
	return "", nil
}

// groupMsgOf reads a consumer's message: its ack subject says which
// delivery it is and its stream sequence.
func groupMsgOf(m *nats.Msg) groupMsg {
	gm := groupMsg{subject: m.Subject, reply: m.Reply, data: m.Data}
	toks := strings.Split(strings.TrimPrefix(m.Reply, ackPrefix), ".")
	if len(toks) == 7 {
		gm.delivered, _ = strconv.ParseUint(toks[2], 10, 64)
		gm.seq, _ = strconv.ParseUint(toks[3], 10, 64)
	}
	return gm
}

// groupDeliver buffers one message of the group for the member, or writes
// it off as a dead letter when it has been delivered max_deliver times.
func (ss *Session) groupDeliver(ctx context.Context, out sink, m groupMsg) {
	g := ss.grp
	if m.delivered == 0 || m.seq == 0 {
		_ = ss.s.nc.Publish(m.reply, []byte("+TERM")) // not a consumer's message
		return
	}
	if int(m.delivered) > g.topic.GroupMaxDeliver() {
		ss.s.deadLetter(ctx, g, m)
		return
	}
	receipt := strings.TrimPrefix(m.reply, ackPrefix)
	if !g.pull {
		g.mu.Lock()
		g.held[receipt] = time.Now().Add(g.topic.GroupAckWait())
		g.mu.Unlock()
		ss.s.heldBy.Store(receipt, g) // an HTTP ack on this edge frees the member too
	}
	d := &delivery{seq: m.seq, data: m.data, receipt: receipt, attempt: m.delivered}
	ss.s.stats.delivered.Add(1)
	ss.cursor = max(ss.cursor, m.seq)
	ss.message(out, d)
}

// credit is how many more messages the member may take now.
func (g *groupState) credit() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return max(g.prefetch-len(g.held), 0)
}

// wakeUp tells a member's pump that it may take more.
func (g *groupState) wakeUp() {
	select {
	case g.released <- struct{}{}:
	default:
	}
}

// expire forgets the messages whose ack wait is over (the server delivers
// them again, maybe to another member): the member may take others.
func (g *groupState) expire(now time.Time) {
	g.mu.Lock()
	n := 0
	for r, at := range g.held {
		if now.After(at) {
			delete(g.held, r)
			g.s.heldBy.Delete(r)
			n++
		}
	}
	g.mu.Unlock()
	if n > 0 {
		g.wakeUp()
	}
}

// release forgets a receipt the member acked or nacked; true when it held
// it.
func (g *groupState) release(receipt string) bool {
	g.mu.Lock()
	_, ok := g.held[receipt]
	delete(g.held, receipt)
	g.mu.Unlock()
	if ok {
		g.s.heldBy.Delete(receipt)
		g.wakeUp()
	}
	return ok
}

// groupGiveBack nacks what a leaving member still holds, so the others get
// it at once.
func (s *Server) groupGiveBack(g *groupState) {
	g.mu.Lock()
	held := g.held
	g.held = map[string]time.Time{}
	g.mu.Unlock()
	for r := range held {
		s.heldBy.Delete(r)
		_ = s.nc.Publish(ackPrefix+r, nakBody(0))
	}
}

// ackPrefix starts the subject a JetStream message is acked on; a receipt
// is that subject without it: <stream>.<consumer>.<deliveries>.<stream
// seq>.<consumer seq>.<time>.<pending>.
const ackPrefix = "$JS.ACK."

// checkReceipt refuses a receipt that is not one of consumer's messages in
// stream: a client acks only its own group's.
func checkReceipt(receipt, stream, consumer string) error {
	toks := strings.Split(receipt, ".")
	if len(toks) != 7 || toks[0] != stream || toks[1] != consumer {
		return fmt.Errorf("%w: %q is not a receipt of this group", ErrBadReceipt, truncate(receipt, 80))
	}
	for _, tok := range toks[2:] {
		if !digits(tok) {
			return fmt.Errorf("%w: %q is not a receipt of this group", ErrBadReceipt, truncate(receipt, 80))
		}
	}
	return nil
}

// ErrBadReceipt is a receipt that is not of the group acking it.
var ErrBadReceipt = errors.New("bad receipt")

func nakBody(delay time.Duration) []byte {
	if delay <= 0 {
		return []byte("-NAK")
	}
	b, _ := json.Marshal(struct {
		Delay int64 `json:"delay"`
	}{int64(delay)})
	return append([]byte("-NAK "), b...)
}

// MaxNackDelay bounds the delay a nack asks for.
const MaxNackDelay = time.Hour

// groupAck acks (or nacks, with delay) a member connection's message.
func (ss *Session) groupAck(receipt string, nack bool, delay time.Duration) error {
	g := ss.grp
	if err := checkReceipt(receipt, ss.store.Stream, g.name); err != nil {
		return err
	}
	body := []byte("+ACK")
	if nack {
		body = nakBody(delay)
	}
	ss.s.stats.acks.Add(1)
	g.release(receipt)
	return ss.s.nc.Publish(ackPrefix+receipt, body)
}

// GroupAcks are the receipts an HTTP client acks and nacks at once.
type GroupAcks struct {
	Ack   []string `json:"ack"`
	Nack  []string `json:"nack"`
	Delay string   `json:"delay"` // the nacks': a Go duration, up to MaxNackDelay
}

// MaxGroupAcks bounds the receipts of one HTTP ack.
const MaxGroupAcks = 1000

// AckGroup acks and nacks the receipts of a subscriber's group over HTTP
// (any edge: a receipt names its message), and says how many of each.
// Every receipt is checked before any is sent; they are on the server
// when it returns (a flush), though one whose ack wait was over may have
// been delivered again meanwhile.
func (s *Server) AckGroup(ctx context.Context, c Subscriber, a GroupAcks) (acked, nacked int, err error) {
	t := c.Topic
	if !t.HasGroup(c.Group) {
		return 0, 0, fmt.Errorf("%w: topic %s has no group %q", ErrBadGroup, t.Name, c.Group)
	}
	if n := len(a.Ack) + len(a.Nack); n == 0 || n > MaxGroupAcks {
		return 0, 0, fmt.Errorf("%w: an ack holds 1 to %d receipts, not %d", ErrBadReceipt, MaxGroupAcks, n)
	}
	var delay time.Duration
	if a.Delay != "" {
		if delay, err = time.ParseDuration(a.Delay); err != nil || delay < 0 || delay > MaxNackDelay {
			return 0, 0, fmt.Errorf("%w: delay is a duration up to %s", ErrBadReceipt, MaxNackDelay)
		}
	}
	stream, name := t.Store().Stream, GroupConsumer(t.Name, c.App, c.Group)
	seen := make(map[string]bool, len(a.Ack)+len(a.Nack))
	for _, r := range append(append([]string(nil), a.Ack...), a.Nack...) {
		if err := checkReceipt(r, stream, name); err != nil {
			return 0, 0, err
		}
		if seen[r] {
			return 0, 0, fmt.Errorf("%w: %q is given twice", ErrBadReceipt, truncate(r, 80))
		}
		seen[r] = true
	}
	for r := range seen { // a member of this edge that holds one may take another
		if g, ok := s.heldBy.Load(r); ok {
			g.(*groupState).release(r)
		}
	}
	for _, r := range a.Ack {
		if err := s.nc.Publish(ackPrefix+r, []byte("+ACK")); err != nil {
			return 0, 0, fmt.Errorf("acking: %w", err)
		}
	}
	for _, r := range a.Nack {
		if err := s.nc.Publish(ackPrefix+r, nakBody(delay)); err != nil {
			return 0, 0, fmt.Errorf("nacking: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	if err := s.nc.FlushWithContext(ctx); err != nil {
		return 0, 0, fmt.Errorf("acking: %w", err)
	}
	s.stats.acks.Add(int64(len(a.Ack) + len(a.Nack)))
	return len(a.Ack), len(a.Nack), nil
}

// deadLetter stores a message delivered max_deliver times as a dead letter
// of its group — on the topic's subject of kind "dlq", with the original's
// sequence and deliveries, once whatever edge writes it — and ends its
// deliveries. When the record cannot be stored the message is nacked, to
// be tried again: never dropped.
func (s *Server) deadLetter(ctx context.Context, g *groupState, m groupMsg) {
	seq := strconv.FormatUint(m.seq, 10)
	rec := nats.NewMsg(g.topic.Store().Subject(g.topic.Name, kindDLQ, g.app, g.group, ""))
	rec.Data = m.data
	rec.Header.Set("Jetway-Dead-Seq", seq)
	rec.Header.Set("Jetway-Dead-Deliveries", strconv.FormatUint(m.delivered-1, 10))
	rec.Header.Set("Jetway-Dead-Subject", m.subject)
	rec.Header.Set("Nats-Msg-Id", "dlq\x00"+g.name+"\x00"+seq)
	rec.Header.Set("Nats-TTL", strconv.FormatInt(int64(g.topic.MaxAge()/time.Second), 10)+"s")
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	if _, err := s.js.PublishMsg(ctx, rec); err != nil {
		s.log.Warn("push: storing a dead letter; delivering the message again in a second", "topic", g.topic.Name, "group", g.group, "seq", seq, "err", err)
		_ = s.nc.Publish(m.reply, nakBody(time.Second))
		return
	}
	s.stats.deadLetters.Add(1)
	_ = s.nc.Publish(m.reply, []byte("+TERM"))
}

// groupPull answers a pull of a group: up to max messages and
// groupPullBytes, waiting up to wait for the first. They are the client's
// until it acks them by their receipts (on any edge) or their ack wait is
// over. reason is the kick's, when one ended the wait.
func (ss *Session) groupPull(ctx context.Context, out *pullSink, max int, wait time.Duration) (reason string, err error) {
	// The group's consumer counts a stored message a moment after the
	// publisher's ack; a pull that would not wait at all could answer
	// "nothing" for one already stored.
	deadline := time.Now().Add(wait)
	if wait < groupPullGrace {
		deadline = time.Now().Add(groupPullGrace)
	}
	for {
		left := time.Until(deadline)
		if n := len(out.msgs); n > 0 || left < 10*time.Millisecond {
			// What there is now, within what the answer holds.
			if room := groupPullBytes - out.bytes; n < max && room >= groupMsgBytes {
				return ss.groupFetch(ctx, out, nil, max-n, room, 0)
			}
			return "", nil
		}
		// The first, as soon as there is one.
		if reason, err := ss.groupFetch(ctx, out, nil, 1, groupMsgBytes, left); err != nil || reason != "" {
			return reason, err
		}
		if len(out.msgs) == 0 && time.Until(deadline) < 10*time.Millisecond {
			return "", nil // nothing within the wait (or dead letters only)
		}
	}
}
