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
	cons       jetstream.Consumer
	prefetch   int
	pull       bool

	credits chan struct{} // a token per message the member may take

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
	cons, err := ss.s.groupConsumer(ctx, ss.store, t, c.App, c.Group, name)
	if err != nil {
		return err
	}
	prefetch := c.Prefetch
	if prefetch <= 0 || prefetch > MaxPrefetch {
		prefetch = DefaultPrefetch
	}
	g := &groupState{topic: t, app: c.App, group: c.Group, name: name, cons: cons, prefetch: prefetch,
		credits: make(chan struct{}, prefetch), held: map[string]time.Time{}}
	for range prefetch {
		g.credits <- struct{}{}
	}
	ss.grp = g
	return nil
}

// groupConsumer makes the group's consumer, or updates it to the topic's
// settings: once per member connection (a JetStream API call), so that a
// consumer deleted by an operator is made again by the next member rather
// than followed by a handle of one that is gone (its pulls would find no
// responder, and no heartbeat would ever be missed).
func (s *Server) groupConsumer(ctx context.Context, store bus.PushStore, t *registry.Topic, app, group, name string) (jetstream.Consumer, error) {
	prefix := store.TopicPrefix(t.Name)
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	cons, err := s.js.CreateOrUpdateConsumer(ctx, store.Stream, jetstream.ConsumerConfig{
		Durable:        name,
		Description:    fmt.Sprintf("Jetway group %q of app %q on topic %q", group, app, t.Name),
		FilterSubjects: []string{prefix + kindAll + ".>", prefix + kindApp + "." + bus.PushToken(app) + ".>"},
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        t.GroupAckWait(),
		MaxDeliver:     -1, // the edge counts, and writes the dead letter
		MaxAckPending:  groupMaxAckPending,
		DeliverPolicy:  jetstream.DeliverNewPolicy,
		Metadata:       map[string]string{"jetway_topic": t.Name, "jetway_app": app, "jetway_group": group},
	})
	if err != nil {
		return nil, fmt.Errorf("opening group %s's consumer: %w", group, err)
	}
	return cons, nil
}

// ErrBadGroup is a group a topic does not have, or a group subscription
// over a transport that cannot ack.
var ErrBadGroup = errors.New("bad group")

// groupPump serves a member connection until its client leaves, its
// connection is ended or a write fails.
func (ss *Session) groupPump(ctx context.Context, out sink) (reason string, err error) {
	g, sb := ss.grp, ss.sb
	out.ready(ss.topic, Cursor{Epoch: ss.epoch})
	// A consumer deleted under a member ends it (the server's "consumer
	// deleted"), as do missing heartbeats: it reconnects, and its edge
	// makes the consumer again.
	iter, err := g.cons.Messages(jetstream.PullMaxMessages(g.prefetch), jetstream.PullExpiry(15*time.Second),
		jetstream.PullHeartbeat(5*time.Second), jetstream.WithMessagesErrOnMissingHeartbeat(true))
	if err != nil {
		return "", fmt.Errorf("following group %s: %w", g.group, err)
	}
	done := make(chan struct{})
	msgs := make(chan jetstream.Msg)
	errc := make(chan error, 1)
	go func() { // the only caller of iter.Next; after done it gives back what it gets
		for {
			select {
			case <-g.credits:
			case <-done:
			}
			m, err := iter.Next()
			if err != nil {
				errc <- err
				return
			}
			select {
			case <-done:
				_ = m.Nak()
				continue
			default:
			}
			select {
			case msgs <- m:
			case <-done:
				_ = m.Nak()
			}
		}
	}()
	defer func() {
		close(done)
		iter.Drain() // the goroutine gives back what the iterator holds, then ends
		ss.s.groupGiveBack(g)
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if err := ss.flush(out); err != nil {
			return "", err
		}
		select {
		case m := <-msgs:
			ss.groupDeliver(ctx, out, m)
			for n := 1; n < batchMax && out.pending() < batchBytes; n++ {
				select {
				case m := <-msgs:
					ss.groupDeliver(ctx, out, m)
					continue
				default:
				}
				break
			}
		case err := <-errc:
			return "", fmt.Errorf("following group %s: %w", g.group, err)
		case <-sb.wake:
			if sb.pingDue.Swap(false) {
				if err := out.ping(); err != nil {
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

// groupDeliver buffers one message of the group for the member, or writes
// it off as a dead letter when it has been delivered max_deliver times.
func (ss *Session) groupDeliver(ctx context.Context, out sink, m jetstream.Msg) {
	g := ss.grp
	md, err := m.Metadata()
	if err != nil {
		_ = m.Term() // not a consumer's message
		g.credit()
		return
	}
	if ps, ok := out.(*pullSink); ok && ps.full { // no room in this answer: the next one's
		_ = m.Nak()
		return
	}
	if int(md.NumDelivered) > g.topic.GroupMaxDeliver() {
		ss.s.deadLetter(ctx, g, m, md)
		g.credit()
		return
	}
	receipt := strings.TrimPrefix(m.Reply(), ackPrefix)
	if !g.pull {
		g.mu.Lock()
		g.held[receipt] = time.Now().Add(g.topic.GroupAckWait())
		g.mu.Unlock()
	}
	d := &delivery{seq: md.Sequence.Stream, data: m.Data(), receipt: receipt, attempt: md.NumDelivered}
	ss.s.stats.delivered.Add(1)
	if md.Sequence.Stream > ss.cursor {
		ss.cursor = md.Sequence.Stream
	}
	out.message(ss.topic, ss.epoch, d)
}

// credit lets the member take one more message.
func (g *groupState) credit() {
	select {
	case g.credits <- struct{}{}:
	default:
	}
}

// expire forgets the messages whose ack wait is over (the server delivers
// them again, maybe to another member) and gives their credit back.
func (g *groupState) expire(now time.Time) {
	g.mu.Lock()
	n := 0
	for r, at := range g.held {
		if now.After(at) {
			delete(g.held, r)
			n++
		}
	}
	g.mu.Unlock()
	for range n {
		g.credit()
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
		g.credit()
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
	for _, r := range append(append([]string(nil), a.Ack...), a.Nack...) {
		if err := checkReceipt(r, stream, name); err != nil {
			return 0, 0, err
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
func (s *Server) deadLetter(ctx context.Context, g *groupState, m jetstream.Msg, md *jetstream.MsgMetadata) {
	seq := strconv.FormatUint(md.Sequence.Stream, 10)
	rec := nats.NewMsg(g.topic.Store().Subject(g.topic.Name, kindDLQ, g.app, g.group, ""))
	rec.Data = m.Data()
	rec.Header.Set("Jetway-Dead-Seq", seq)
	rec.Header.Set("Jetway-Dead-Deliveries", strconv.FormatUint(md.NumDelivered-1, 10))
	rec.Header.Set("Jetway-Dead-Subject", m.Subject())
	rec.Header.Set("Nats-Msg-Id", "dlq\x00"+g.name+"\x00"+seq)
	rec.Header.Set("Nats-TTL", strconv.FormatInt(int64(g.topic.MaxAge()/time.Second), 10)+"s")
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	if _, err := s.js.PublishMsg(ctx, rec); err != nil {
		s.log.Warn("push: storing a dead letter; delivering the message again in a second", "topic", g.topic.Name, "group", g.group, "seq", seq, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	s.stats.deadLetters.Add(1)
	_ = m.Term()
}

// groupPull answers a pull of a group: up to max messages, waiting up to
// wait for the first. They are the client's until it acks them by their
// receipts (on any edge) or their ack wait is over.
func (ss *Session) groupPull(ctx context.Context, out *pullSink, max int, wait time.Duration) error {
	g := ss.grp
	take := func(b jetstream.MessageBatch, err error) error {
		if err != nil {
			return fmt.Errorf("pulling group %s: %w", g.group, err)
		}
		for m := range b.Messages() {
			ss.groupDeliver(ctx, out, m)
		}
		if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("pulling group %s: %w", g.group, err)
		}
		return nil
	}
	deadline := time.Now().Add(wait)
	for {
		// A fetch waits at most 5s, so that a client gone is noticed.
		left := min(time.Until(deadline), 5*time.Second)
		var err error
		if left >= time.Second { // one message, as soon as there is one
			err = take(g.cons.Fetch(1, jetstream.FetchMaxWait(left)))
		} else {
			err = take(g.cons.FetchNoWait(max))
		}
		if err != nil {
			return err
		}
		if n := len(out.msgs); n > 0 { // and what else there is now
			if n < max && !out.full {
				return take(g.cons.FetchNoWait(max - n))
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Until(deadline) < time.Second {
			return nil // nothing within the wait (dead letters only)
		}
	}
}
