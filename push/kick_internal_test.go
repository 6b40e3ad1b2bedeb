package push

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// recordingSink counts what a pump writes.
type recordingSink struct{ messages int }

func (r *recordingSink) ready(string, Cursor)              {}
func (r *recordingSink) message(string, string, *delivery) { r.messages++ }
func (r *recordingSink) gap(string, Gap)                   {}
func (r *recordingSink) flush() error                      { return nil }
func (r *recordingSink) ping() error                       { return nil }
func (r *recordingSink) pending() int                      { return 0 }

// An end asked for before a message reaches the subscriber's writer (a
// revocation the registry sent, then a message published) ends the
// connection without writing the message: with both the kick and the
// wake waiting, the writer takes the kick first, not at a coin toss.
func TestKickGoesBeforeAPendingMessage(t *testing.T) {
	s := &Server{stop: make(chan struct{})}
	h := &hub{s: s, topic: "orders", ring: make([]atomic.Pointer[delivery], 8)}
	sb := newSub("shop", "")
	ss := &Session{s: s, topic: "orders", h: h, sb: sb, caughtUp: true}
	// The revocation first, then a message for everyone in the ring and
	// the subscriber's wake.
	sb.endAs(endRevoked, "the token is no longer accepted")
	h.ring[0].Store(&delivery{idx: 0, seq: 1, kind: kindAll, data: []byte("late"), at: time.Now()})
	h.head.Store(1)
	h.last.Store(1)
	sb.next.Store(1)
	sb.poke()
	out := &recordingSink{}
	reason, err := ss.pump(context.Background(), out)
	if err != nil || reason != "the token is no longer accepted" || out.messages != 0 {
		t.Errorf("reason %q, err %v, %d messages written after the end was asked", reason, err, out.messages)
	}
}

// A pull's wait ending (its timer's kick, at once for wait 0) is no end
// of that kind: the pump still collects what is waiting, then stops.
func TestPullWaitOverStillCollects(t *testing.T) {
	s := &Server{stop: make(chan struct{})}
	h := &hub{s: s, topic: "orders", ring: make([]atomic.Pointer[delivery], 8)}
	sb := newSub("shop", "")
	ss := &Session{s: s, topic: "orders", h: h, sb: sb, caughtUp: true}
	sb.end(waitReason)
	h.ring[0].Store(&delivery{idx: 0, seq: 1, kind: kindAll, data: []byte("waiting"), at: time.Now()})
	h.head.Store(1)
	h.last.Store(1)
	sb.next.Store(1)
	out := &recordingSink{}
	reason, err := ss.pump(context.Background(), out)
	if err != nil || reason != waitReason || out.messages != 1 {
		t.Errorf("reason %q, err %v, %d messages collected, want the 1 waiting", reason, err, out.messages)
	}
}
