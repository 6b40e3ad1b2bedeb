package workers

import (
	"errors"
	"strconv"
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

// replyStream relays a streamed response to the edge (bus/stream.go): the
// head, then each chunk as the backend produces it, never more than window
// ahead of what the edge has written to its caller, then the end. It
// returns when the backend's stream ends, the edge cancels (stop is then
// called at once, which ends the backend's stream even while it waits for
// its next message), or the deadline passes.
func (w *Worker) replyStream(m *nats.Msg, resp *backend.Response, window int, deadline time.Time, stop func()) {
	nc := w.o.Conn
	ackInbox := nc.NewInbox()
	ackCh := make(chan *nats.Msg, window+4) // acks come every window/2 chunks, then one end
	// Each chunk names its own ack subject (ackInbox.<n>): the edge's
	// user may answer a message once, and NATS counts that per reply
	// subject, so a subject shared by every chunk would be used up.
	acks, err := nc.ChanSubscribe(ackInbox+".*", ackCh)
	if err != nil {
		w.replyError(m, "", bus.CodeBadGateway, "cannot relay the stream: "+err.Error())
		return
	}
	defer func() { _ = acks.Unsubscribe() }()
	h := make(nats.Header, len(resp.Header)+2)
	for k, vs := range resp.Header {
		h[k] = vs
	}
	bus.CleanHeaders(h)
	bus.EncodeReply(h, resp.Status)
	h[bus.HdrStream] = []string{bus.StreamOpen}
	if err := nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: h}); err != nil {
		w.log.Warn("sending a stream's head", "subject", m.Subject, "err", err)
		return
	}
	// The edge's answers: how many chunks it has written, or a cancel.
	var acked atomic.Int64
	progress := make(chan struct{}, 1)
	cancelled := make(chan struct{})
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case a := <-ackCh:
				if string(a.Data) == bus.StreamCancel {
					close(cancelled)
					stop()
					return
				}
				if n, err := strconv.ParseInt(string(a.Data), 10, 64); err == nil && n > acked.Load() {
					acked.Store(n)
					select {
					case progress <- struct{}{}:
					default:
					}
				}
			case <-done:
				return
			}
		}
	}()
	sent := int64(0)
	dataHdr := nats.Header{bus.HdrStream: {bus.StreamData}}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	send := func(chunk []byte) error {
		for sent-acked.Load() >= int64(window) {
			select {
			case <-progress:
			case <-cancelled:
				return errStreamCancelled
			case <-timer.C:
				return errStreamStalled
			}
		}
		select {
		case <-cancelled:
			return errStreamCancelled
		default:
		}
		if sent >= bus.MaxStreamMessages {
			return errors.New("the stream is longer than the bus carries")
		}
		if err := nc.PublishMsg(&nats.Msg{Subject: m.Reply, Reply: ackInbox + "." + strconv.FormatInt(sent, 10), Header: dataHdr, Data: chunk}); err != nil {
			return err
		}
		sent++
		return nil
	}
	if err := resp.Stream(send); err != nil && !errors.Is(err, errStreamCancelled) {
		w.log.Debug("stream ended early", "subject", m.Subject, "chunks", sent, "err", err)
	}
	if err := nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{bus.HdrStream: {bus.StreamEnd}}}); err != nil {
		w.log.Debug("sending a stream's end", "subject", m.Subject, "err", err)
	}
}
