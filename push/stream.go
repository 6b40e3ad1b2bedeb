package push

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jetway-gw/jetway/bus"
)

// streamState is what a subscription's start needs of the stream.
type streamState struct {
	epoch       string
	first, last uint64
	at          time.Time
}

// stateTTL is how long a stream state serves the checks that may be a
// little stale (an epoch, the first sequence).
const stateTTL = time.Second

// errNoStream is returned while the push stream does not exist.
var errNoStream = errors.New("the push stream " + bus.StreamPush + " does not exist (an admin command makes it: jetway topic put)")

// state returns the stream's state, fetched when older than maxAge (0:
// always fetched).
func (s *Server) state(ctx context.Context, maxAge time.Duration) (streamState, error) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if maxAge > 0 && time.Since(s.st.at) < maxAge {
		return s.st, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	info, err := s.js.Stream(ctx, bus.StreamPush)
	if err != nil {
		if strings.Contains(err.Error(), "stream not found") {
			return streamState{}, errNoStream
		}
		return streamState{}, fmt.Errorf("reading the push stream: %w", err)
	}
	ci := info.CachedInfo()
	s.st = streamState{epoch: epochOf(ci.Created), first: ci.State.FirstSeq, last: ci.State.LastSeq, at: time.Now()}
	return s.st, nil
}

// delivery is one message of a topic, as subscribers get it.
type delivery struct {
	seq  uint64
	kind string // all, app, dev
	app  string
	id   string
	data []byte
	at   time.Time
}

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
}

// replayBatch is how many messages one direct get asks for.
const replayBatch = 256

// fetch reads up to replayBatch messages of a topic from sequence from
// on, in order, with one batched direct get (no consumer); more reports
// whether the stream holds further ones.
func (s *Server) fetch(ctx context.Context, prefix string, from uint64) (out []delivery, more bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	inbox := s.nc.NewInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, false, fmt.Errorf("replaying: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	req, _ := json.Marshal(directGet{Seq: from, NextBySubj: prefix + ">", Batch: replayBatch})
	if err := s.nc.PublishRequest("$JS.API.DIRECT.GET."+bus.StreamPush, inbox, req); err != nil {
		return nil, false, fmt.Errorf("replaying: %w", err)
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, false, fmt.Errorf("replaying from %d: %w", from, err)
		}
		switch m.Header.Get("Status") {
		case "404": // nothing from there on
			return out, false, nil
		case "204": // end of the batch
			pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
			return out, pending > 0 && len(out) == replayBatch, nil
		case "":
		default:
			return nil, false, fmt.Errorf("replaying from %d: %s %s", from, m.Header.Get("Status"), m.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return nil, false, fmt.Errorf("replaying: a message without its sequence")
		}
		d := delivery{seq: seq, data: m.Data}
		if ts, err := time.Parse(time.RFC3339Nano, m.Header.Get("Nats-Time-Stamp")); err == nil {
			d.at = ts
		}
		var ok bool
		if d.kind, d.app, d.id, ok = parseSubject(m.Header.Get("Nats-Subject"), prefix); ok {
			out = append(out, d)
		}
	}
}

// exists reports whether the stream still holds the message at seq.
func (s *Server) exists(ctx context.Context, seq uint64) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	defer cancel()
	req, _ := json.Marshal(directGet{Seq: seq})
	m, err := s.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+bus.StreamPush, req)
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
