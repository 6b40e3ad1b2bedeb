package push

import (
	"context"
	"errors"
	"time"
)

// Pull is the HTTP transport for clients that hold no connection (a
// partner's batch job, a serverless function): GET /_jetway/pull/<topic>
// answers with the messages after a cursor — at once when there are some,
// or when the first arrives within the wait (a long poll) — and the client
// acks what it has handled (POST /_jetway/ack/<topic>, or after= the
// answer's cursor next time). The same cursors, gaps and addressing as
// the connections'.

// Pull bounds: messages an answer holds at most (and by default), and the
// longest wait.
const (
	MaxPullMessages     = 1000
	DefaultPullMessages = 100
	MaxPullWait         = 60 * time.Second
)

// Pulled is the answer to a pull.
type Pulled struct {
	Topic    string          `json:"topic"`
	Messages []PulledMessage `json:"messages"`
	Gaps     []Gap           `json:"gaps,omitempty"`
	// Cursor is where the next pull goes on (after=): the last message
	// here, or past messages that were not for this client.
	Cursor string `json:"cursor"`
}

// PulledMessage is one message of a pull.
type PulledMessage struct {
	Cursor string `json:"cursor"`
	Data   string `json:"data"`
	// A group's message: the receipt it is acked by, and which delivery
	// of it this is.
	Receipt string `json:"receipt,omitempty"`
	Attempt uint64 `json:"attempt,omitempty"`
}

// Ended is a pull that ended before it had anything: the edge shutting
// down (Shutdown: pull again, from any edge) or the subscription revoked
// (its app disabled, its key rotated, its grant gone).
type Ended struct {
	Reason   string
	Shutdown bool
	Expired  bool // the token it came with expired (401)
}

func (e *Ended) Error() string { return e.Reason }

// ended is the error of a pull a kick ended: the client left, or the
// connection's end.
func ended(reason string) error {
	if reason == goneReason {
		return context.Canceled
	}
	return &Ended{Reason: reason, Shutdown: reason == shutdownReason, Expired: reason == expiredReason}
}

// waitReason ends a pull whose wait is over with nothing to answer.
const waitReason = "\x00the wait is over"

// errPulled ends a pull's pump once it has something to answer.
var errPulled = errors.New("pulled")

// Pull serves a session as one pull: up to max messages after its start,
// waiting up to wait for the first, and answers with write — the pull's
// or its error — within the session (the connection counts against the
// caps until the answer is written; the edge bounds the write by
// WriteTimeout). It closes the session.
func (s *Server) Pull(ctx context.Context, ss *Session, max int, wait time.Duration, write func(*Pulled, error) error) {
	defer ss.close()
	p, err := s.pull(ctx, ss, max, wait)
	werr := write(p, err)
	switch {
	case werr != nil && p != nil && ss.grp != nil:
		s.nackPulled(p.Messages) // the client has not got them: to another at once
	case werr == nil && err == nil:
		ss.sendReceipts()
	}
}

// nackPulled gives back a group pull's messages that never reached its
// client.
func (s *Server) nackPulled(ms []PulledMessage) {
	for _, m := range ms {
		_ = s.nc.Publish(ackPrefix+m.Receipt, nakBody(0))
	}
}

// WriteTimeout is how long a write to a client may block.
func (s *Server) WriteTimeout() time.Duration { return s.o.WriteTimeout }

func (s *Server) pull(ctx context.Context, ss *Session, max int, wait time.Duration) (*Pulled, error) {
	if max <= 0 || max > MaxPullMessages {
		max = DefaultPullMessages
	}
	out := &pullSink{max: max, maxBytes: batchBytes}
	if ss.grp != nil {
		ss.grp.pull = true
		out.maxBytes = groupPullBytes + groupMsgBytes // the pulls' max_bytes bound it
		reason, err := ss.groupPull(ctx, out, max, min(wait, MaxPullWait))
		if err == nil && reason != "" {
			err = ended(reason)
		}
		if err != nil {
			s.nackPulled(out.msgs) // nobody will have them: at once to another
			return nil, err
		}
		return &Pulled{Topic: ss.topic, Messages: append([]PulledMessage{}, out.msgs...), Cursor: Cursor{Epoch: ss.epoch, Seq: ss.cursor}.String()}, nil
	}
	t := time.AfterFunc(min(wait, MaxPullWait), func() { ss.sb.end(waitReason) })
	defer t.Stop()
	stop := context.AfterFunc(ctx, func() { ss.sb.end(goneReason) })
	defer stop()
	reason, err := ss.pump(ctx, out)
	switch {
	case errors.Is(err, errPulled), reason == waitReason:
	case err != nil:
		return nil, err
	case reason == goneReason:
		return nil, context.Canceled
	case len(out.msgs) == 0 && len(out.gaps) == 0:
		return nil, ended(reason)
	}
	cursor := ss.cursor
	if out.full {
		cursor = out.last // the messages it had no room for come next
	}
	p := &Pulled{Topic: ss.topic, Messages: out.msgs, Gaps: out.gaps, Cursor: Cursor{Epoch: ss.epoch, Seq: cursor}.String()}
	if p.Messages == nil {
		p.Messages = []PulledMessage{}
	}
	return p, nil
}

// pullSink collects a pull's answer; its flush ends the pump once there is
// something.
type pullSink struct {
	max      int
	maxBytes int // an answer's bytes (batchBytes; a group's pulls bound theirs)
	msgs     []PulledMessage
	gaps     []Gap
	bytes    int
	full     bool   // max messages, or batchBytes of them: the rest is the next pull's
	last     uint64 // the sequence of the last message taken
}

func (o *pullSink) ready(string, Cursor) {}

func (o *pullSink) message(_, epoch string, d *delivery) {
	if o.full {
		return
	}
	m := PulledMessage{Cursor: Cursor{Epoch: epoch, Seq: d.seq}.String(), Data: string(d.data), Receipt: d.receipt, Attempt: d.attempt}
	o.msgs = append(o.msgs, m)
	o.bytes += len(m.Cursor) + len(m.Data) + 32
	o.last = d.seq
	o.full = len(o.msgs) >= o.max || o.bytes >= o.maxBytes
}

func (o *pullSink) gap(_ string, g Gap) { o.gaps = append(o.gaps, g) }

func (o *pullSink) flush() error {
	if len(o.msgs) > 0 || len(o.gaps) > 0 {
		return errPulled
	}
	return nil
}

func (o *pullSink) ping() error { return nil }

// pending makes the pump flush (and so end) once the answer is full.
func (o *pullSink) pending() int {
	if o.full {
		return batchBytes
	}
	return o.bytes
}
