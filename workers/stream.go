package workers

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/backend"
	"github.com/jetway-gw/jetway/bus"
)

// errStreamCancelled ends a stream whose caller went away.
var errStreamCancelled = errors.New("the caller went away")

// errStreamStalled ends a stream whose edge stopped acknowledging.
var errStreamStalled = errors.New("the edge stopped reading the stream")

// streamProbe is how often a stream that sends nothing asks whether its
// edge still listens (a probe nobody receives comes back as NATS's
// no-responders status, which ends the stream).
const streamProbe = time.Second

// streamSession is the worker's side of a call that takes a stream
// (bus/stream.go), open from before the backend is called until the reply
// is sent: its acks come on ackInbox.<n>, and a cancel, or a probe or
// chunk the edge no longer receives, stops the call at once, even while
// the backend has not produced its first message.
type streamSession struct {
	w        *Worker
	m        *nats.Msg
	window   int64
	deadline time.Time
	ackInbox string
	acks     *nats.Subscription

	acked     atomic.Int64
	sent      atomic.Int64 // chunks sent; written by relay only
	lastSend  atomic.Int64 // unix nanos of the last message to the edge
	progress  chan struct{}
	cancelled chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// openStream subscribes the stream's acks and starts watching them; stop
// cancels the call. nil when the subscription fails (the call then gets
// one reply).
func (w *Worker) openStream(m *nats.Msg, window int, deadline time.Time, stop func()) *streamSession {
	nc := w.o.Conn
	s := &streamSession{w: w, m: m, window: int64(window), deadline: deadline, ackInbox: nc.NewInbox(),
		progress: make(chan struct{}, 1), cancelled: make(chan struct{}), done: make(chan struct{})}
	// Each message names its own ack subject (ackInbox.<n>): the edge's
	// user may answer a message once, and NATS counts that per reply
	// subject.
	ackCh := make(chan *nats.Msg, window+8)
	acks, err := nc.ChanSubscribe(s.ackInbox+".*", ackCh)
	if err != nil {
		w.log.Warn("cannot take acks for a stream", "subject", m.Subject, "err", err)
		return nil
	}
	s.acks = acks
	s.lastSend.Store(time.Now().UnixNano())
	go s.watch(ackCh, stop)
	return s
}

// watch reads the edge's answers and probes a quiet stream.
func (s *streamSession) watch(ackCh chan *nats.Msg, stop func()) {
	probe := time.NewTicker(streamProbe)
	defer probe.Stop()
	probes := 0
	for {
		select {
		case a := <-ackCh:
			// A cancel, or NATS saying nobody received what we sent.
			if string(a.Data) == bus.StreamCancel || (len(a.Data) == 0 && a.Header.Get("Status") == "503") {
				close(s.cancelled)
				stop()
				return
			}
			if n, err := strconv.ParseInt(string(a.Data), 10, 64); err == nil && n > s.acked.Load() && n <= s.sent.Load() {
				s.acked.Store(n)
				select {
				case s.progress <- struct{}{}:
				default:
				}
			}
		case <-probe.C:
			// Not while the window is full: the edge is then writing to a
			// slow caller, and has an ack-carrying chunk to answer (or to
			// cancel on) when it is done.
			if time.Since(time.Unix(0, s.lastSend.Load())) < streamProbe || s.sent.Load()-s.acked.Load() >= s.window {
				continue
			}
			probes++
			_ = s.w.o.Conn.PublishMsg(&nats.Msg{Subject: s.m.Reply, Reply: s.ackInbox + ".p" + strconv.Itoa(probes),
				Header: nats.Header{bus.HdrStream: {bus.StreamPing}}})
			s.lastSend.Store(time.Now().UnixNano())
		case <-s.done:
			return
		}
	}
}

// close ends the session: its watcher and its subscription.
func (s *streamSession) close() {
	s.closeOnce.Do(func() {
		close(s.done)
		_ = s.acks.Unsubscribe()
	})
}

// relay sends a streamed response: the head, each chunk as the backend
// produces it, never more than window ahead of what the edge has written
// to its caller, then the end. It returns when the backend's stream ends,
// the edge cancels or stops listening, or the deadline passes.
func (s *streamSession) relay(resp *backend.Response) {
	nc, m := s.w.o.Conn, s.m
	h := make(nats.Header, len(resp.Header)+3)
	if resp.Channel != "" {
		h[channelHeader] = []string{resp.Channel}
	}
	for k, vs := range resp.Header {
		h[k] = vs
	}
	bus.CleanHeaders(h)
	bus.EncodeReply(h, resp.Status)
	if resp.Classified {
		bus.SetOutcome(h, resp.Failed)
	}
	h[bus.HdrStream] = []string{bus.StreamOpen}
	if err := nc.PublishMsg(&nats.Msg{Subject: m.Reply, Reply: s.ackInbox + ".h", Header: h}); err != nil {
		s.w.log.Warn("sending a stream's head", "subject", m.Subject, "err", err)
		// The stream is run all the same, to no one: whatever wraps it
		// (its span, its context) ends as it would.
		_ = resp.Stream(func([]byte) error { return err })
		return
	}
	s.lastSend.Store(time.Now().UnixNano())
	dataHdr := nats.Header{bus.HdrStream: {bus.StreamData}}
	stride := max(s.window/2, 1)
	timer := time.NewTimer(time.Until(s.deadline))
	defer timer.Stop()
	send := func(chunk []byte) error {
		for s.sent.Load()-s.acked.Load() >= s.window {
			select {
			case <-s.progress:
			case <-s.cancelled:
				return errStreamCancelled
			case <-timer.C:
				return errStreamStalled
			}
		}
		select {
		case <-s.cancelled:
			return errStreamCancelled
		default:
		}
		n := s.sent.Load()
		if n >= bus.MaxStreamMessages {
			return errors.New("the stream is longer than one call may be")
		}
		// Only every half window asks for an ack (and can carry a
		// cancel): the edge's user may answer each reply subject once,
		// and the server keeps a permission entry for every reply it
		// delivers until it is used or expires.
		reply := ""
		if (n+1)%stride == 0 {
			reply = s.ackInbox + "." + strconv.FormatInt(n+1, 10)
		}
		s.sent.Store(n + 1) // before the publish: its ack may come at once
		if err := nc.PublishMsg(&nats.Msg{Subject: m.Reply, Reply: reply, Header: dataHdr, Data: chunk}); err != nil {
			return err
		}
		s.lastSend.Store(time.Now().UnixNano())
		return nil
	}
	end := nats.Header{bus.HdrStream: {bus.StreamEnd}}
	// A stream stopped because its caller went away (the send saw the
	// cancel, or the backend's call was cancelled first) tells nobody.
	if err := resp.Stream(send); err != nil && !errors.Is(err, errStreamCancelled) && !errors.Is(err, context.Canceled) {
		var se *backend.StreamError
		switch {
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errStreamStalled):
			s.w.log.Debug("stream ended early", "subject", m.Subject, "chunks", s.sent.Load(), "err", err)
			end[bus.HdrError] = []string{string(bus.CodeGatewayTimeout)} // the edge tells the caller
		case errors.As(err, &se):
			// The backend's own failure, already sent as the last chunk.
			s.w.log.Debug("stream ended early", "subject", m.Subject, "chunks", s.sent.Load(), "err", err)
		default:
			// The worker could not go on (a message over the bus's max
			// payload, one it could not write, too many): the edge ends
			// the caller's stream with an element saying so, so a cut
			// stream is never taken for a whole one.
			if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionDraining) {
				s.w.log.Debug("stream broken off", "subject", m.Subject, "chunks", s.sent.Load(), "err", err) // the worker stops
			} else {
				s.w.log.Warn("stream broken off", "subject", m.Subject, "chunks", s.sent.Load(), "err", err)
			}
			end[bus.HdrError] = []string{string(bus.CodeBadGateway)}
		}
	}
	if err := nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: end}); err != nil {
		s.w.log.Debug("sending a stream's end", "subject", m.Subject, "err", err)
	}
}
