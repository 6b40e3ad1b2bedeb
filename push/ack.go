package push

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
)

// Acknowledgements are cumulative: a client acks the cursor of the last
// message it has handled, and whatever it connects to next — any edge,
// any transport, hours later — can start after it (after=ack). An ack is
// kept per stream, topic and subscriber in the bus.BucketPushAcks bucket
// (the stream: a topic that changes mode has the other's cursors), under
//
//	<stream>.<topic>.<app>.d.<device>[.<user>]  a connection that named its device (and had a token's user)
//	<stream>.<topic>.<app>.u.<user>             one with a token (its subject) and no device
//	<stream>.<topic>.<app>.t                    one with a token without a subject
//	<stream>.<topic>.<app>.a                    one with neither: the app's key
//
// each token itself when it is letters, digits, '_' and '-' (at most 64),
// otherwise '=' and its base64url. An ack only moves forward: a stored ack
// is replaced by a later one only (compare-and-set on its revision), so
// two connections of one device, or an ack that arrives late, never take
// a subscriber back. A lost ack costs redelivery, never loss: the client
// resumes from an earlier ack and drops sequences it has (pushclient does).

// ackKey is the key of a subscriber's ack. token says it connected with a
// token (user is its subject, "" when it had none).
func ackKey(stream, topic, app, device, user string, token bool) string {
	k := stream + "." + ackToken(topic) + "." + ackToken(app)
	switch {
	case device != "" && user != "":
		return k + ".d." + ackToken(device) + "." + ackToken(user)
	case device != "":
		return k + ".d." + ackToken(device)
	case user != "":
		return k + ".u." + ackToken(user)
	case token:
		return k + ".t"
	}
	return k + ".a"
}

var plainAckToken = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ackToken is one token of an ack key. A plain token never starts with
// '=', so the encoding is injective.
func ackToken(s string) string {
	if plainAckToken.MatchString(s) {
		return s
	}
	return "=" + base64.RawURLEncoding.EncodeToString([]byte(s))
}

// later reports whether cursor a is after b: of a later epoch (a stream
// made anew), or of the same one with a higher sequence.
func later(a, b Cursor) bool {
	if a.Epoch != b.Epoch {
		if len(a.Epoch) != len(b.Epoch) {
			return len(a.Epoch) > len(b.Epoch)
		}
		return a.Epoch > b.Epoch
	}
	return a.Seq > b.Seq
}

// BadAck is an ack the client should not have sent: of another epoch, or
// past what it was sent.
type BadAck struct{ Reason string }

func (e *BadAck) Error() string { return e.Reason }

// ErrAcksFull is returned when the ack bucket has no room for a new
// subscriber's ack (the subscriber resumes from what the stream keeps).
var ErrAcksFull = errors.New("the push ack bucket " + bus.BucketPushAcks + " is full: no room for a new subscriber's ack")

// ackStoreErr names a full bucket.
func ackStoreErr(err error) error {
	var ae *jetstream.APIError
	if errors.As(err, &ae) && strings.Contains(ae.Description, "maximum bytes") || strings.Contains(err.Error(), "maximum bytes exceeded") {
		return ErrAcksFull
	}
	return fmt.Errorf("storing the ack: %w", err)
}

// ErrNoAckBucket is returned while the ack bucket does not exist.
var ErrNoAckBucket = errors.New("the push ack bucket " + bus.BucketPushAcks + " does not exist (an admin command makes it: jetway topic put)")

// ackKV returns the ack bucket, bound once it exists.
func (s *Server) ackKV(ctx context.Context) (jetstream.KeyValue, error) {
	if kv := s.acks.kv.Load(); kv != nil {
		return *kv, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	kv, err := s.js.KeyValue(ctx, bus.BucketPushAcks)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, ErrNoAckBucket
	}
	if err != nil {
		return nil, fmt.Errorf("opening the ack bucket: %w", err)
	}
	s.acks.kv.Store(&kv)
	return kv, nil
}

// loadAck returns a subscriber's stored ack; ok is false when it has none.
func (s *Server) loadAck(ctx context.Context, key string) (c Cursor, ok bool, err error) {
	kv, err := s.ackKV(ctx)
	if err != nil {
		return Cursor{}, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Cursor{}, false, nil
	}
	if err != nil {
		return Cursor{}, false, fmt.Errorf("reading the ack: %w", err)
	}
	if c, err = ParseCursor(string(e.Value())); err != nil || c.Epoch == "" {
		return Cursor{}, false, nil // not one an edge wrote: as if none
	}
	return c, true, nil
}

// storeAck moves a subscriber's ack forward to c, and returns the ack
// stored now: c, or a later one already there.
func (s *Server) storeAck(ctx context.Context, key string, c Cursor) (Cursor, error) {
	kv, err := s.ackKV(ctx)
	if err != nil {
		return Cursor{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	val := []byte(c.String())
	// A few rounds: each lost one is another writer's ack stored between
	// the read and the write.
	for range 8 {
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if _, err = kv.Create(ctx, key, val); err == nil {
				return c, nil
			}
		case err != nil:
			return Cursor{}, fmt.Errorf("reading the ack: %w", err)
		default:
			if old, perr := ParseCursor(string(e.Value())); perr == nil && old.Epoch != "" && !later(c, old) {
				return old, nil
			}
			if _, err = kv.Update(ctx, key, val, e.Revision()); err == nil {
				return c, nil
			}
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return Cursor{}, ackStoreErr(err)
		}
	}
	return Cursor{}, errors.New("storing the ack: too many concurrent writers of it")
}

// acker stores the acks connections send (WebSocket, TCP): the newest of
// each key is kept in memory and written every ackFlush, so a client that
// acks every message costs one bucket write per key and interval.
type acker struct {
	kv atomic.Pointer[jetstream.KeyValue]

	mu      sync.Mutex
	pending map[string]Cursor
	closed  bool          // the writer has written the last: no more are taken
	wake    chan struct{} // capacity 1: pending has keys

	stored, failed, dropped atomic.Int64
}

// Connection acks: how long they are held to coalesce, how many keys wait
// at most (past it an ack is dropped — redelivery, not loss — and
// counted), and how many writes run at once.
const (
	ackFlush      = 100 * time.Millisecond
	ackMaxPending = 65536
	ackWriters    = 16
)

// ackLater queues an ack of a connection; false when the queue is full.
func (s *Server) ackLater(key string, c Cursor) bool {
	a := &s.acks
	a.mu.Lock()
	old, had := a.pending[key]
	switch {
	case a.closed:
		a.mu.Unlock()
		a.dropped.Add(1)
		return false
	case had && !later(c, old):
	case !had && len(a.pending) >= ackMaxPending:
		a.mu.Unlock()
		a.dropped.Add(1)
		return false
	default:
		a.pending[key] = c
	}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
	return true
}

// ackWriter writes the queued acks until Close has ended the connections,
// then once more (Close waits for it, within its context).
func (s *Server) ackWriter(done chan<- struct{}) {
	defer close(done)
	for {
		select {
		case <-s.acks.wake:
		case <-s.acksStop:
			s.acks.mu.Lock()
			s.acks.closed = true
			s.acks.mu.Unlock()
			s.flushAcks(context.Background())
			return
		}
		select { // coalesce
		case <-time.After(ackFlush):
		case <-s.acksStop:
		}
		s.flushAcks(context.Background())
	}
}

// flushAcks writes every queued ack, ackWriters at a time.
func (s *Server) flushAcks(ctx context.Context) {
	a := &s.acks
	a.mu.Lock()
	batch := a.pending
	a.pending = make(map[string]Cursor, len(batch))
	a.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	slots := make(chan struct{}, ackWriters)
	var wg sync.WaitGroup
	for key, c := range batch {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if _, err := s.storeAck(ctx, key, c); err != nil {
				a.failed.Add(1)
				s.log.Debug("push: storing an ack", "key", key, "cursor", c.String(), "err", err)
				return
			}
			a.stored.Add(1)
		}()
	}
	wg.Wait()
}

// Ack stores the ack of a subscriber that is not connected (HTTP: POST
// /_jetway/ack/<topic>) and returns the ack stored now. The cursor must be
// of the topic's stream as it is (its epoch; none: the current one) and
// not past its last message: a *BadAck otherwise.
func (s *Server) Ack(ctx context.Context, c Subscriber, at Cursor) (Cursor, error) {
	st, err := s.state(ctx, c.Topic.Store(), time.Time{})
	if err != nil {
		return Cursor{}, err
	}
	if at.Epoch == "" {
		at.Epoch = st.epoch
	}
	if at.Seq > st.last || at.Epoch != st.epoch {
		// The state may be older than the message: read it anew.
		if st, err = s.state(ctx, c.Topic.Store(), time.Now()); err != nil {
			return Cursor{}, err
		}
	}
	switch {
	case at.Epoch != st.epoch:
		return Cursor{}, &BadAck{fmt.Sprintf("cursor %s is of another epoch of the stream (now %s)", at, st.epoch)}
	case at.Seq > st.last:
		return Cursor{}, &BadAck{fmt.Sprintf("cursor %s is past the stream's last message (%d)", at, st.last)}
	}
	s.stats.acks.Add(1)
	return s.storeAck(ctx, c.ackKey(), at)
}

// ack is a connection's ack: of its epoch (none: its epoch), not past what
// it was sent. An error is the client's fault and ends the connection.
func (ss *Session) ack(text string) error {
	c, err := ParseCursor(text)
	if err != nil {
		return err
	}
	switch {
	case c.Epoch == "":
		c.Epoch = ss.epoch
	case c.Epoch != ss.epoch:
		return &BadAck{fmt.Sprintf("%s is of another epoch than this connection's (%s)", c, ss.epoch)}
	}
	if sent := ss.sb.cursor.Load(); c.Seq > sent {
		return &BadAck{fmt.Sprintf("%s is past the last message sent (%s)", c, strconv.FormatUint(sent, 10))}
	}
	ss.s.stats.acks.Add(1)
	ss.s.ackLater(ss.ackKey, c)
	return nil
}

// clientFrame handles one frame of a connection's client (WebSocket, TCP)
// and returns its type: an ack is taken; the transport answers for the
// others (a TCP pong), and ignores types it does not know. err is the
// client's fault, and ends the connection with code: 1007 for a frame that
// is not a JSON object, 1008 for a bad ack or a frame past the command
// rate (limits.go), which every frame counts against.
func (ss *Session) clientFrame(b []byte) (typ string, code int, err error) {
	if err := ss.command(); err != nil {
		return "", CodePolicy, err
	}
	var f struct {
		Type    string `json:"type"`
		Cursor  string `json:"cursor"`
		Receipt string `json:"receipt"`
		Delay   string `json:"delay"`
		Token   string `json:"token"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return "", CodeInvalid, errors.New("a client frame is one JSON object")
	}
	switch {
	case (f.Type == "ack" || f.Type == "nack") && ss.grp != nil:
		var delay time.Duration
		if f.Delay != "" {
			if delay, err = time.ParseDuration(f.Delay); err != nil || delay < 0 || delay > MaxNackDelay {
				return f.Type, CodePolicy, fmt.Errorf("%s: delay is a duration up to %s", f.Type, MaxNackDelay)
			}
		}
		if err := ss.groupAck(f.Receipt, f.Type == "nack", delay); err != nil {
			return f.Type, CodePolicy, fmt.Errorf("%s: %w", f.Type, err)
		}
	case f.Type == "nack":
		return f.Type, CodePolicy, errors.New("nack: only a group's messages are nacked")
	case f.Type == "token":
		if err := ss.refreshToken(f.Token); err != nil {
			return f.Type, CodePolicy, fmt.Errorf("token: %w", err)
		}
	case f.Type == "ack":
		if err := ss.ack(f.Cursor); err != nil {
			return f.Type, CodePolicy, fmt.Errorf("ack: %w", err)
		}
	}
	return f.Type, 0, nil
}

// refreshToken takes a fresh token a connection's client sent: the
// connection then ends at its expiry instead of the old one's.
func (ss *Session) refreshToken(token string) error {
	if ss.refresh == nil {
		return errors.New("this connection was not made with a token")
	}
	exp, err := ss.refresh(token)
	if err != nil {
		return err
	}
	n := int64(0)
	if !exp.IsZero() && exp.Before(maxExpiry) {
		n = exp.UnixNano()
	}
	ss.sb.expires.Store(n)
	return nil
}
