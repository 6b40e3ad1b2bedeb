package push

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// hub follows one topic on this edge with one ordered consumer and hands
// each message to the subscribers it is addressed to.
type hub struct {
	s      *Server
	key    string // in Server.hubs: the stream and the topic
	store  bus.PushStore
	topic  string
	prefix string

	mu    sync.RWMutex
	subs  map[*sub]struct{}
	refs  int         // subscribers joined, under Server.mu
	timer *time.Timer // the linger after the last left; under Server.mu
	cc    jetstream.ConsumeContext
}

// sub is one subscriber as its hub sees it: its address and queue.
type sub struct {
	app, device string
	ch          chan *delivery // shared by every subscriber it is for: read-only
	// lagging is set when a message did not fit in ch: the subscriber
	// catches up from the stream (its writer is woken on wake).
	lagging chan struct{} // capacity 1: set = one value in it
	kick    chan string   // capacity 1: the reason the connection must end
	// check says why the subscriber may no longer stay ("" : it may).
	check func(*registry.Snapshot) string
}

func newSub(app, device string, queue int) *sub {
	return &sub{app: app, device: device, ch: make(chan *delivery, queue), lagging: make(chan struct{}, 1), kick: make(chan string, 1)}
}

// wants reports whether a message is addressed to the subscriber.
func (sb *sub) wants(d *delivery) bool {
	switch d.kind {
	case kindAll:
		return true
	case kindApp:
		return d.app == sb.app
	case kindDev:
		return d.app == sb.app && d.id == sb.device && sb.device != ""
	}
	return false
}

// offer queues a message without blocking; a full queue marks the
// subscriber lagging instead.
func (sb *sub) offer(d *delivery) {
	select {
	case sb.ch <- d:
	default:
		select {
		case sb.lagging <- struct{}{}:
		default:
		}
	}
}

// end asks the subscriber's connection to close, once.
func (sb *sub) end(reason string) {
	select {
	case sb.kick <- reason:
	default:
	}
}

// join adds a subscriber to its topic's hub, starting the hub (its
// ordered consumer, from the stream's next message) when there is none,
// and counts the connection (Close waits for it). The hub is live when
// join returns: every message stored after that reaches sb's queue, or
// marks it lagging.
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
	s.mu.Unlock()
	h.mu.Lock()
	h.subs[sb] = struct{}{}
	h.mu.Unlock()
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
	h := &hub{s: s, key: p.Stream + " " + topic, store: p, topic: topic, prefix: p.TopicPrefix(topic), subs: map[*sub]struct{}{}}
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

// deliver hands one message to the subscribers it is addressed to.
func (h *hub) deliver(m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		return
	}
	d := &delivery{seq: md.Sequence.Stream, data: m.Data(), at: md.Timestamp}
	var ok bool
	if d.kind, d.app, d.id, ok = parseSubject(m.Subject(), h.prefix); !ok {
		return
	}
	h.mu.RLock()
	for sb := range h.subs {
		if sb.wants(d) {
			sb.offer(d)
		}
	}
	h.mu.RUnlock()
}

// allLagging makes every subscriber catch up from the stream.
func (h *hub) allLagging() {
	h.mu.RLock()
	for sb := range h.subs {
		select {
		case sb.lagging <- struct{}{}:
		default:
		}
	}
	h.mu.RUnlock()
}

// shut stops the hub's consumer and ends its subscribers.
func (h *hub) shut() {
	if h.cc != nil {
		h.cc.Stop()
	}
	h.mu.RLock()
	for sb := range h.subs {
		sb.end(shutdownReason)
	}
	h.mu.RUnlock()
}

// Recheck asks every subscriber whether it may stay under a new registry
// snapshot, and ends those that may not with their reason (a disabled
// app, a rotated key, a deleted topic or grant). The edge calls it with
// every snapshot, so a revocation reaches connections as soon as it
// reaches the edge.
func (s *Server) Recheck(snap *registry.Snapshot) {
	s.mu.Lock()
	hubs := make([]*hub, 0, len(s.hubs))
	for _, h := range s.hubs {
		hubs = append(hubs, h)
	}
	s.mu.Unlock()
	var subs []*sub
	for _, h := range hubs {
		// Copied out: the checks run without the lock the hub's
		// deliveries take.
		h.mu.RLock()
		for sb := range h.subs {
			subs = append(subs, sb)
		}
		h.mu.RUnlock()
	}
	for _, sb := range subs {
		if sb.check == nil {
			continue
		}
		if reason := sb.check(snap); reason != "" {
			sb.end(reason)
		}
	}
}
