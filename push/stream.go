package push

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
)

// streamState is what a subscription's start needs of a stream.
type streamState struct {
	epoch       string
	first, last uint64
	asked       time.Time // when the request that read it was sent
}

// errNoStream is returned while a push stream does not exist.
var errNoStream = errors.New("the push streams do not exist (an admin command makes them: jetway topic put)")

// state returns a store's stream state as read by a request sent at or
// after since: concurrent callers share one request (a reconnect storm
// costs one stream info per round trip, not one per client).
func (s *Server) state(ctx context.Context, p bus.PushStore, since time.Time) (streamState, error) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if st, ok := s.st[p.Stream]; ok && !st.asked.Before(since) {
		return st, nil
	}
	asked := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	info, err := s.js.Stream(ctx, p.Stream)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return streamState{}, errNoStream
		}
		return streamState{}, fmt.Errorf("reading stream %s: %w", p.Stream, err)
	}
	ci := info.CachedInfo()
	st := streamState{epoch: epochOf(ci.Created), first: ci.State.FirstSeq, last: ci.State.LastSeq, asked: asked}
	s.st[p.Stream] = st
	return st, nil
}

// delivery is one message of a topic, as subscribers get it. A live one
// is shared by every session of its hub: read-only but for its encodings.
type delivery struct {
	idx  uint64 // its index in the hub's ring (live ones)
	seq  uint64
	kind string // all, app, dev
	app  string
	id   string
	data []byte
	at   time.Time
	// A group's message (group.go): the receipt it is acked by, and
	// which delivery of it this is.
	receipt string
	attempt uint64
	// receiptFor: its publisher asked for delivery receipts (receipts.go);
	// the publisher's app id ("_" for a NATS publisher).
	receiptFor string
	// A live delivery's wire forms, made once by its hub for every
	// session of the hub's epoch (nil: make them, see wsLine, sseEvent).
	epoch   string
	ws, sse []byte
}

// size is what the delivery holds, for the ring's bytes.
func (d *delivery) size() int { return len(d.data) + len(d.ws) + len(d.sse) }

// parseSubject reads a push subject's address: its last four tokens
// (kind, app, id, key) after the topic's prefix.
func parseSubject(subject, prefix string) (kind, app, id string, ok bool) {
	rest, found := strings.CutPrefix(subject, prefix)
	if !found {
		return "", "", "", false
	}
	toks := strings.Split(rest, ".")
	if len(toks) != 4 {
		return "", "", "", false
	}
	var ok1, ok2 bool
	app, ok1 = bus.PushUntoken(toks[1])
	id, ok2 = bus.PushUntoken(toks[2])
	return toks[0], app, id, ok1 && ok2
}

// directGet is a batched direct get request ($JS.API.DIRECT.GET).
type directGet struct {
	Seq        uint64 `json:"seq,omitempty"`
	NextBySubj string `json:"next_by_subj,omitempty"`
	Batch      int    `json:"batch,omitempty"`
	MaxBytes   int    `json:"max_bytes,omitempty"`
}

// A replay batch: at most this many messages and bytes per direct get
// (the server cuts a batch at the bytes; the next request goes on).
const (
	replayBatch = 256
	replayBytes = 4 << 20
)

// fetch reads one batch of a topic's messages from sequence from on, in
// order, with one batched direct get (no consumer). last is the highest
// sequence the server returned — messages parseSubject refuses (put there
// by some other NATS publisher) included, so the next batch goes on after
// them — and more whether the stream holds further ones. At most
// Options.Replays fetches run at once on an edge; the others wait, within
// ctx.
func (s *Server) fetch(ctx context.Context, p bus.PushStore, prefix string, from uint64) (out []*delivery, last uint64, more bool, err error) {
	select {
	case s.replays <- struct{}{}:
		defer func() { <-s.replays }()
	case <-ctx.Done():
		return nil, 0, false, ctx.Err()
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	inbox := s.nc.NewInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, 0, false, fmt.Errorf("replaying: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	req, _ := json.Marshal(directGet{Seq: from, NextBySubj: prefix + ">", Batch: replayBatch, MaxBytes: replayBytes})
	if err := s.nc.PublishRequest("$JS.API.DIRECT.GET."+p.Stream, inbox, req); err != nil {
		return nil, 0, false, fmt.Errorf("replaying: %w", err)
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, 0, false, fmt.Errorf("replaying from %d: %w", from, err)
		}
		switch m.Header.Get("Status") {
		case "404": // nothing from there on
			return out, last, false, nil
		case "204": // the end of this batch
			pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
			return out, last, pending > 0 && last >= from, nil
		case "":
		default:
			return nil, 0, false, fmt.Errorf("replaying from %d: %s %s", from, m.Header.Get("Status"), m.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return nil, 0, false, errors.New("replaying: a message without its sequence")
		}
		last = max(last, seq)
		d := &delivery{seq: seq, data: m.Data, receiptFor: receiptFor(m.Header)}
		if ts, err := time.Parse(time.RFC3339Nano, m.Header.Get("Nats-Time-Stamp")); err == nil {
			d.at = ts
		}
		var ok bool
		if d.kind, d.app, d.id, ok = parseSubject(m.Header.Get("Nats-Subject"), prefix); ok {
			out = append(out, d)
		}
	}
}

// exists reports whether a store's stream still holds the message at seq.
func (s *Server) exists(ctx context.Context, p bus.PushStore, seq uint64) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	req, _ := json.Marshal(directGet{Seq: seq})
	m, err := s.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+p.Stream, req)
	if err != nil {
		return false, fmt.Errorf("reading message %d: %w", seq, err)
	}
	switch m.Header.Get("Status") {
	case "":
		return true, nil
	case "404":
		return false, nil
	}
	return false, fmt.Errorf("reading message %d: %s %s", seq, m.Header.Get("Status"), m.Header.Get("Description"))
}
