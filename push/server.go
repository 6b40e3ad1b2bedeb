package push

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// Options configure a Server.
type Options struct {
	// Conn is the edge's NATS connection. Required.
	Conn *nats.Conn
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// RingLen and RingBytes bound each topic's ring on this edge: the
	// live messages every subscriber reads at its own pace. A subscriber
	// further behind than the ring catches up from the stream. 0 means
	// 4096 messages and 32 MiB.
	RingLen   int
	RingBytes int
	// Ping is how often an idle connection is pinged (WebSocket) or sent
	// a comment (SSE); 0 means 25s.
	Ping time.Duration
	// WriteTimeout closes a connection whose write blocks past it (the
	// client resumes from its cursor); 0 means 10s.
	WriteTimeout time.Duration
	// RequestTimeout bounds each NATS request (a publish's ack, a replay
	// batch, the stream's state); 0 means 5s.
	RequestTimeout time.Duration
	// Linger keeps a topic's hub (its ordered consumer) this long after
	// its last subscriber left, so reconnecting clients do not make and
	// drop consumers; 0 means 30s.
	Linger time.Duration
	// Replays caps the replay batches (direct gets) in flight at once on
	// this edge, whatever the number of clients catching up; 0 means 32.
	Replays int
	// MaxConnsPerApp and MaxConnsPerIP cap this edge's connections of one
	// app and from one client address (429 with Retry-After past them);
	// 0: no cap. ConnectRate caps the new connections a second on this
	// edge (503 with Retry-After: a reconnect storm is paced); 0: none.
	MaxConnsPerApp, MaxConnsPerIP, ConnectRate int
	// ClusterMaxConnsPerApp and ClusterMaxConnsPerIP cap the connections
	// of one app and from one address on all the edges together (429
	// past them), as of the edges' last census (census.go); 0: no cap.
	// Every edge should be given the same.
	ClusterMaxConnsPerApp, ClusterMaxConnsPerIP int
	// CensusInterval is how often the census goes out; 0 means
	// CensusInterval (1s).
	CensusInterval time.Duration
	// NodeID names this edge to the others (census, operators' queries);
	// "" means a random one.
	NodeID string
	// CommandsPerSecond and CommandBurst bound the frames a WebSocket or
	// TCP connection's client sends (acks, nacks, tokens, pongs, pings,
	// anything): a token bucket per connection of CommandsPerSecond a
	// second up to CommandBurst, plus one per message written to it (an
	// ack of each is always room). Past it the connection is closed with
	// 1008 (limits.go). CommandsPerSecond 0 means
	// DefaultCommandsPerSecond, negative no cap; CommandBurst 0 means
	// twice the rate.
	CommandsPerSecond, CommandBurst int
}

// Server is an edge's push side: publishes, hubs and subscribers.
type Server struct {
	o   Options
	log *slog.Logger
	nc  *nats.Conn
	js  jetstream.JetStream

	stateMu sync.Mutex
	st      map[string]streamState // by stream
	replays chan struct{}          // a slot per replay batch in flight

	stats struct {
		conns, delivered, catchUps, replayed, writeTimeouts, refused, acks, deadLetters, receipts atomic.Int64
		disconnects                                                                               [nEndKinds]atomic.Int64 // by endKind
	}
	acks     acker
	acksDone chan struct{} // closed when the ack writer has written the last
	acksStop chan struct{} // closed by Close once the connections have ended
	stopAcks sync.Once
	heldBy   sync.Map // receipt → *groupState of the member connection holding it (group.go)

	admitMu sync.Mutex
	admit   *admission
	// censusDone is closed when the census has said this edge is gone
	// (nil: no census); censusTrimmed once one was cut to max_payload.
	censusDone    chan struct{}
	censusTrimmed atomic.Bool
	latency       histogram // publish → write of live deliveries

	mu     sync.Mutex
	hubs   map[string]*hub
	closed bool
	conns  sync.WaitGroup
	stop   chan struct{} // closed by Close: every subscriber ends
}

// New returns a push server over an edge's connection.
func New(o Options) (*Server, error) {
	if o.Conn == nil {
		return nil, errors.New("push: Options.Conn is required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.RingLen <= 0 {
		o.RingLen = 4096
	}
	if o.RingBytes <= 0 {
		o.RingBytes = 32 << 20
	}
	if o.Ping <= 0 {
		o.Ping = 25 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 5 * time.Second
	}
	if o.Linger <= 0 {
		o.Linger = 30 * time.Second
	}
	if o.Replays <= 0 {
		o.Replays = 32
	}
	if o.CommandsPerSecond == 0 {
		o.CommandsPerSecond = DefaultCommandsPerSecond
	}
	if o.CommandBurst <= 0 {
		o.CommandBurst = 2 * max(o.CommandsPerSecond, 1)
	}
	js, err := jetstream.New(o.Conn)
	if err != nil {
		return nil, fmt.Errorf("push: %w", err)
	}
	adm, err := newAdmission(o)
	if err != nil {
		return nil, err
	}
	s := &Server{o: o, log: o.Logger, nc: o.Conn, js: js, hubs: map[string]*hub{}, stop: make(chan struct{}),
		st: map[string]streamState{}, replays: make(chan struct{}, o.Replays), admit: adm, acksDone: make(chan struct{}), acksStop: make(chan struct{})}
	s.acks.pending, s.acks.wake = map[string]Cursor{}, make(chan struct{}, 1)
	if s.o.NodeID == "" {
		s.o.NodeID = nuid.Next()
	}
	query, err := s.nc.Subscribe(bus.PushQuerySubject, s.answerQuery)
	if err != nil {
		return nil, fmt.Errorf("push: answering operators' queries: %w", err)
	}
	if o.ClusterMaxConnsPerApp > 0 || o.ClusterMaxConnsPerIP > 0 {
		census, err := s.nc.Subscribe(bus.PushCensusSubject, s.receiveCensus)
		if err != nil {
			_ = query.Unsubscribe()
			return nil, fmt.Errorf("push: following the connection census: %w", err)
		}
		s.censusDone = make(chan struct{})
		go s.runCensus(census, s.censusDone)
	}
	go func() { <-s.stop; _ = query.Unsubscribe() }()
	go s.janitor()
	go s.ackWriter(s.acksDone)
	return s, nil
}

// Close ends every subscription (each client is told to reconnect, and
// resumes elsewhere from its cursor) and stops the hubs. It waits for the
// subscribers' handlers to return, up to ctx.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.stop)
	}
	hubs := s.hubs
	s.hubs = map[string]*hub{}
	s.mu.Unlock()
	for _, h := range hubs {
		h.shut()
	}
	done := make(chan struct{})
	go func() { s.conns.Wait(); close(done) }()
	// A writer blocked on a client that does not read would hold Close
	// until its write timeout, and never see the kick: a stopping edge
	// closes those connections at once.
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		for _, h := range hubs {
			h.abortWriters(closeGrace)
		}
		select {
		case <-done:
			if s.censusDone != nil { // the peers stop counting this edge's connections at once
				select {
				case <-s.censusDone:
				case <-ctx.Done():
				}
			}
			// The acks the connections sent last are written.
			s.stopAcks.Do(func() { close(s.acksStop) })
			select {
			case <-s.acksDone:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		case <-ctx.Done():
			s.stopAcks.Do(func() { close(s.acksStop) })
			return ctx.Err()
		case <-t.C:
		}
	}
}

// closeGrace is how long Close lets a write in progress finish before it
// closes the connection under it.
const closeGrace = 250 * time.Millisecond

// Stats are an edge's push counters.
type Stats struct {
	// Connections open now; Topics followed now (one consumer each).
	Connections int64 `json:"connections"`
	Topics      int   `json:"topics"`
	// Delivered counts messages written to clients; Replayed those of
	// them read from the stream rather than the live feed.
	Delivered int64 `json:"delivered"`
	Replayed  int64 `json:"replayed"`
	// CatchUps counts the times a client fell behind the ring of live
	// messages and caught up from the stream.
	CatchUps int64 `json:"catch_ups"`
	// WriteTimeouts counts the connections closed because a write
	// blocked past the write timeout (a client that does not read).
	WriteTimeouts int64 `json:"write_timeouts"`
	// Refused counts the connections refused at admission (a cap, the
	// connect rate).
	Refused int64 `json:"refused"`
	// Acks counts the acks received (connections' and HTTP's);
	// AcksStored the bucket writes of connections' acks (many acks of
	// one key within 100 ms are one write), AckErrors those that failed
	// or were dropped (the client is sent those messages again).
	Acks       int64 `json:"acks"`
	AcksStored int64 `json:"acks_stored"`
	AckErrors  int64 `json:"ack_errors"`
	// DeadLetters counts the group messages this edge wrote off as dead
	// letters (delivered max_deliver times).
	DeadLetters int64 `json:"dead_letters"`
	// Receipts counts the delivery receipts this edge stored.
	Receipts int64 `json:"receipts"`
	// Disconnects counts the SSE, WebSocket and TCP connections that
	// ended, by why: client_gone, revoked, expired, shutdown,
	// write_timeout, ping_timeout, frame_error, bad_command,
	// too_many_commands, kicked, error (limits.go).
	Disconnects map[string]int64 `json:"disconnects,omitempty"`
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	topics := len(s.hubs)
	s.mu.Unlock()
	return Stats{Connections: s.stats.conns.Load(), Topics: topics, Delivered: s.stats.delivered.Load(),
		Replayed: s.stats.replayed.Load(), CatchUps: s.stats.catchUps.Load(), WriteTimeouts: s.stats.writeTimeouts.Load(),
		Refused: s.stats.refused.Load(), Acks: s.stats.acks.Load(), AcksStored: s.acks.stored.Load(),
		AckErrors: s.acks.failed.Load() + s.acks.dropped.Load(), DeadLetters: s.stats.deadLetters.Load(),
		Receipts: s.stats.receipts.Load(), Disconnects: s.disconnects()}
}

// disconnects are the ended connections by cause, every cause named.
func (s *Server) disconnects() map[string]int64 {
	m := make(map[string]int64, nEndKinds-1)
	for k := endNone + 1; k < nEndKinds; k++ {
		m[endNames[k]] = s.stats.disconnects[k].Load()
	}
	return m
}

// Message is one message to publish.
type Message struct {
	// To: "" (every subscriber), "app" (the clients of App), "device"
	// (the client of App that connected as device ID) or "user" (the
	// clients of App whose token's subject is ID).
	To  string
	App string
	ID  string
	// Key names the value a latest_only topic keeps the newest of.
	Key  string
	Data []byte
	// IdempotencyKey: a publish retried with the same key (by the same
	// publisher, within 2 minutes) is stored once.
	IdempotencyKey string
	// Receipt asks for a delivery receipt of each write of the message
	// to a client (receipts.go): for a message to a device or a user (one
	// subscriber, or a few), not to a whole app nor a broadcast.
	// user, not a broadcast.
	Receipt bool
}

// Published is the stream's answer to a publish.
type Published struct {
	Topic     string `json:"topic"`
	Seq       uint64 `json:"seq,omitempty"`
	Cursor    string `json:"cursor,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
	// Stored is false for a best_effort publish, answered before the
	// stream has it.
	Stored bool `json:"stored"`
}

// Address kinds of a message, as its subject says them.
const (
	kindAll  = "all"
	kindApp  = "app"
	kindDev  = "dev"
	kindUser = "usr"
	kindDLQ  = "dlq"  // a group's dead letter (group.go): delivered to no one
	kindRcpt = "rcpt" // a delivery receipt (receipts.go): read by its publisher
)

// Problems of a message to publish, for the caller's 400.
var (
	ErrTooLarge  = fmt.Errorf("a push message is at most %d bytes", registry.MaxPushMessage)
	ErrBadTarget = errors.New(`"to" is app, device or user, with the app (and the device's or the user's id)`)
	ErrNotText   = errors.New("a push message is text: UTF-8")
)

// Publish stores a message of topic t, published by publisher (an app id;
// "" for a NATS client of the admin's), and returns its sequence. A
// best_effort topic's publish is not waited for.
func (s *Server) Publish(ctx context.Context, t *registry.Topic, publisher string, m Message) (Published, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	out, err := Publish(ctx, s.js, t, publisher, m)
	if err != nil || !out.Stored {
		return out, err
	}
	// The epoch of any state read since the edge started: it changes only
	// when the stream is made anew.
	st, err := s.state(ctx, t.Store(), time.Time{})
	if err == nil {
		out.Cursor = Cursor{Epoch: st.epoch, Seq: out.Seq}.String()
	}
	return out, nil
}

// Publish stores a message of topic t over any JetStream connection
// allowed to (an edge's, or the admin's for `jetway push publish --nats`);
// ctx bounds the wait for the stream's ack. Cursor is left to the caller.
func Publish(ctx context.Context, js jetstream.JetStream, t *registry.Topic, publisher string, m Message) (Published, error) {
	msg, err := newMsg(t, publisher, m)
	if err != nil {
		return Published{}, err
	}
	out := Published{Topic: t.Name}
	if t.ModeOrDefault() == registry.TopicBestEffort {
		if _, err := js.PublishMsgAsync(msg); err != nil {
			return out, fmt.Errorf("publishing: %w", err)
		}
		return out, nil
	}
	ack, err := js.PublishMsg(ctx, msg)
	if err != nil {
		return out, publishErr(err)
	}
	out.Seq, out.Duplicate, out.Stored = ack.Sequence, ack.Duplicate, true
	return out, nil
}

func publishErr(err error) error {
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		return errNoStream
	}
	return fmt.Errorf("publishing: %w", err)
}

// MaxBatch bounds the messages of one batch publish.
const MaxBatch = 1000

// BatchItem is the answer for one message of a batch: what Publish
// answers, or why it was not stored.
type BatchItem struct {
	Seq       uint64 `json:"seq,omitempty"`
	Cursor    string `json:"cursor,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Stored    bool   `json:"stored"`
	Error     string `json:"error,omitempty"`
	// Unknown: the stream's answer did not come in time; the message may
	// be stored (retry it with its idempotency key to know).
	Unknown bool `json:"unknown,omitempty"`
	// Bad marks an Error that is the message's own (400), not the
	// stream's or the bus's.
	Bad bool `json:"-"`
}

// PublishBatch stores messages of one topic in their order, all in
// flight at once, and answers for each. A message that is not valid is
// answered with its error and the others go on; ctx bounds the wait for
// the acks.
func (s *Server) PublishBatch(ctx context.Context, t *registry.Topic, publisher string, ms []Message) ([]BatchItem, error) {
	if len(ms) > MaxBatch {
		return nil, fmt.Errorf("%w: %d messages; at most %d a batch", ErrBadTarget, len(ms), MaxBatch)
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	out := make([]BatchItem, len(ms))
	acks := make([]jetstream.PubAckFuture, len(ms))
	for i, m := range ms {
		msg, err := newMsg(t, publisher, m)
		if err != nil {
			out[i] = BatchItem{Error: err.Error(), Bad: true}
			continue
		}
		if acks[i], err = s.js.PublishMsgAsync(msg); err != nil {
			out[i] = BatchItem{Error: publishErr(err).Error()}
		}
	}
	if t.ModeOrDefault() == registry.TopicBestEffort {
		return out, nil
	}
	// The epoch of any state read since the edge started (it changes only
	// when the stream is made anew); none known: no cursors.
	epoch := ""
	if st, err := s.state(ctx, t.Store(), time.Time{}); err == nil {
		epoch = st.epoch
	}
	for i, f := range acks {
		if f == nil {
			continue
		}
		ack, ok, err := waitAck(ctx, f)
		switch {
		case !ok:
			out[i] = BatchItem{Unknown: true, Error: "publishing: no answer from the stream in time; the message may be stored"}
		case err != nil:
			out[i] = BatchItem{Error: publishErr(err).Error()}
		default:
			out[i] = BatchItem{Seq: ack.Sequence, Duplicate: ack.Duplicate, Stored: true}
			if epoch != "" {
				out[i].Cursor = Cursor{Epoch: epoch, Seq: ack.Sequence}.String()
			}
		}
	}
	return out, nil
}

// waitAck waits for a publish's answer within ctx; answered is false when
// none came. An answer already there wins over an ended ctx.
func waitAck(ctx context.Context, f jetstream.PubAckFuture) (ack *jetstream.PubAck, answered bool, err error) {
	select {
	case ack := <-f.Ok():
		return ack, true, nil
	case err := <-f.Err():
		return nil, true, err
	default:
	}
	select {
	case ack := <-f.Ok():
		return ack, true, nil
	case err := <-f.Err():
		return nil, true, err
	case <-ctx.Done():
		return nil, false, nil
	}
}

// newMsg is the stream message of a message to publish: its subject, its
// TTL, its idempotency id.
func newMsg(t *registry.Topic, publisher string, m Message) (*nats.Msg, error) {
	if len(m.Data) > registry.MaxPushMessage {
		return nil, ErrTooLarge
	}
	if !utf8.Valid(m.Data) {
		return nil, ErrNotText
	}
	subject, err := Subject(t.Store(), t.Name, m)
	if err != nil {
		return nil, err
	}
	msg := nats.NewMsg(subject)
	msg.Data = m.Data
	msg.Header.Set("Nats-TTL", strconv.FormatInt(int64(t.MaxAge()/time.Second), 10)+"s")
	if m.IdempotencyKey != "" {
		// Scoped by topic and publisher: one app cannot suppress another's
		// message, nor a key of one topic a message of another. NUL is in
		// no name.
		msg.Header.Set("Nats-Msg-Id", t.Name+"\x00"+publisher+"\x00"+m.IdempotencyKey)
	}
	if publisher != "" {
		msg.Header.Set("Jetway-Publisher", publisher)
	}
	if m.Receipt {
		if m.To != "device" && m.To != "user" {
			// Receipts take room in the stream every topic shares: one per
			// subscriber of a whole app would let a publisher crowd out
			// the others' messages.
			return nil, fmt.Errorf("%w: receipts are for a message to a device or a user, not to an app or everyone", ErrBadTarget)
		}
		msg.Header.Set(hdrReceipt, "1")
	}
	return msg, nil
}

func epochOf(created time.Time) string { return strconv.FormatInt(created.UnixMilli(), 10) }

// Subject is the subject a message of a topic is stored on.
func Subject(p bus.PushStore, topic string, m Message) (string, error) {
	switch m.To {
	case "":
		if m.App != "" || m.ID != "" {
			return "", ErrBadTarget
		}
		return p.Subject(topic, kindAll, "", "", m.Key), nil
	case "app":
		if m.App == "" || m.ID != "" {
			return "", ErrBadTarget
		}
		return p.Subject(topic, kindApp, m.App, "", m.Key), nil
	case "device":
		if m.App == "" || m.ID == "" {
			return "", ErrBadTarget
		}
		return p.Subject(topic, kindDev, m.App, m.ID, m.Key), nil
	case "user":
		if m.App == "" || m.ID == "" {
			return "", ErrBadTarget
		}
		return p.Subject(topic, kindUser, m.App, m.ID, m.Key), nil
	}
	return "", ErrBadTarget
}

// Unavailable reports whether err is the stream's or the bus's fault,
// not the caller's.
func Unavailable(err error) bool {
	return err != nil && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrBadTarget) && !errors.Is(err, ErrNotText) && !errors.Is(err, ErrBadCursor)
}
