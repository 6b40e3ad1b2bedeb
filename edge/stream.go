package edge

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// takesStream reports whether a call's answer may come as a stream: a gRPC
// backend (whose method may stream from the server) and a caller that asks
// for NDJSON or SSE, or for anything else (a JSON array, whose elements
// the edge frames), unless the route needs the answer whole or its answers
// are known to come as one reply (arrayStreams). Everything else is one
// reply.
func takesStream(rt *route, accept string) bool {
	if rt.api.Backend.Type != registry.BackendGRPC {
		return false
	}
	return streamBodyFor(accept) != bodyArray || arrayStreams(rt)
}

// streamBody is how a relayed stream's chunks are written to the caller.
type streamBody uint8

const (
	bodyLines  streamBody = iota // NDJSON: each chunk a line, as it comes
	bodyEvents                   // SSE: each chunk an event, as it comes
	bodyArray                    // a JSON array: "[", the chunks between commas, "]"
)

func streamBodyFor(accept string) streamBody {
	switch {
	case strings.Contains(accept, "application/x-ndjson"):
		return bodyLines
	case strings.Contains(accept, "text/event-stream"):
		return bodyEvents
	}
	return bodyArray
}

// arrayStreams reports whether a call of rt asking for a JSON array is
// offered a stream. Not when the route needs the answer whole (a response
// body rewrite, a fallback that keeps last good answers: the edge rewrites
// and keeps only whole bodies), nor, for a while, once its answer came as
// one 200 reply — a unary method's, which will not stream: a stream costs
// a subscription on each side per call, which a unary call should not pay
// every time.
func arrayStreams(rt *route) bool {
	if rt.cache != nil || (rt.rewrite != nil && rt.rewrite.respBody != nil) {
		return false
	}
	if until, ok := oneReply.Load(rt.api); ok {
		if time.Now().UnixNano() < until.(int64) {
			return false
		}
		if oneReply.CompareAndDelete(rt.api, until) {
			oneReplies.Add(-1)
		}
	}
	return true
}

// oneReply holds, per API entry (*registry.API, replaced when the entry
// changes), until when its JSON array calls take one reply (unix nanos).
// A hint only: a wrong one costs a collected answer (the worker's array
// made whole, within the max payload) until it expires. oneReplies counts
// its entries, which are all dropped past maxOneReplies (entries of APIs
// long replaced are never looked up again).
var (
	oneReply   sync.Map
	oneReplies atomic.Int64
)

const (
	oneReplyFor   = time.Minute
	maxOneReplies = 4096
)

// noteOneReply learns from an array call answered with one reply: a 200
// that is not a fallback's is a unary method's answer (a stream, even an
// empty one, comes as a stream; an older worker's whole array is as good).
func noteOneReply(rt *route, m *nats.Msg) {
	rep, err := bus.DecodeReply(m.Header)
	if err != nil || rep.Status != http.StatusOK || m.Header.Get("X-Jetway-Fallback") != "" {
		return
	}
	if _, loaded := oneReply.Swap(rt.api, time.Now().Add(oneReplyFor).UnixNano()); !loaded && oneReplies.Add(1) > maxOneReplies {
		oneReply.Clear()
		oneReplies.Store(0)
	}
}

// sendStream is send for a call that takes a stream (bus/stream.go): the
// request goes out with this call's own inbox as its reply subject. A
// single reply there (a unary method, an error, an older worker) is the
// call's reply as usual; a stream is written to the caller as it comes,
// each chunk flushed, and acknowledged so the worker sends more. It ends
// at the stream's end, the deadline, or when the caller goes away (the
// worker is told, and ends the backend's stream). A JSON array's chunks
// are its elements: the edge writes "[" with the head, a comma before
// each element after the first, and "]" at the end — after the element
// that says why, when the stream is cut.
func (c *call) sendStream(ctx context.Context, m *nats.Msg, sent int) error {
	nc := c.e.o.Conn
	var token [16]byte
	_, _ = rand.Read(token[:])
	m.Reply = bus.StreamInboxPrefix + "." + hex.EncodeToString(token[:])
	sub, err := nc.SubscribeSync(m.Reply)
	if err != nil {
		return c.requestError(err)
	}
	// Unsubscribing is also how a worker learns the caller left when no
	// chunk is there to answer: its next probe or chunk comes back as
	// no-responders.
	defer func() { _ = sub.Unsubscribe() }()
	// A worker that ignores the window cannot park more than this here:
	// past it the subscription reports a slow consumer and the call ends.
	_ = sub.SetPendingLimits(2*bus.StreamWindow+8, int((2*bus.StreamWindow+8)*max(nc.MaxPayload(), 1<<20)))
	first, err := c.firstOfStream(ctx, nc, sub, m, sent)
	if err != nil {
		return c.requestError(err)
	}
	body := streamBodyFor(c.r.Header.Get("Accept"))
	if bus.StreamKind(first.Header) != bus.StreamOpen {
		if body == bodyArray {
			noteOneReply(c.rt, first)
		}
		c.msg = first
		return nil
	}
	rep, err := bus.DecodeReply(first.Header)
	if err != nil {
		ge := err.(*bus.Error)
		return c.refuse(ge.Code, ge.Message)
	}
	dst := c.Header()
	for k, vs := range first.Header {
		if name, ok := bus.DecodeHeaderName(k); ok {
			dst[name] = vs
		}
	}
	status := rep.Status
	c.outcome, c.upstream = rep.Outcome, rep.Status
	if rw := c.rt.rewrite; rw != nil {
		// A stream's head takes the response rewrite's status map and
		// headers; its messages are not rewritten (docs/policies.md).
		applies := true
		if rw.respWhen != nil {
			in := c.condInput()
			in.Status, in.RespHeader = status, dst
			applies = holds(rw.respWhen, in, c.e.log, c.rt.api.Name)
		}
		if applies {
			if to, ok := rw.status[status]; ok {
				status = to
			}
			rw.respHeaders.apply(dst)
		}
	}
	dst["X-Content-Type-Options"] = []string{"nosniff"}
	// A caller that stops reading cannot hold the call past its deadline.
	ctl := http.NewResponseController(c.w)
	_ = ctl.SetWriteDeadline(c.deadline)
	c.WriteHeader(status)
	if body == bodyArray {
		_, _ = c.Write(arrayOpen)
	}
	_ = ctl.Flush()
	// The worker's ack inbox, from the head's reply (<inbox>.h): the edge
	// answers only there. A chunk's reply naming anything else (the KV
	// API, another call) is never answered, so a worker cannot make the
	// edge publish where it likes through its answers.
	ackBase := ""
	if base, ok := strings.CutSuffix(first.Reply, ".h"); ok && strings.HasPrefix(base, bus.InboxPrefixWorker+".") {
		ackBase = base + "."
	}
	answer := func(m *nats.Msg, data string) bool {
		rest, ok := strings.CutPrefix(m.Reply, ackBase)
		if ackBase == "" || !ok || (m != first && !isDigits(rest)) {
			return false // the head's own reply is <inbox>.h, a chunk's <inbox>.<n>
		}
		_ = m.Respond([]byte(data))
		return true
	}
	written := 0
	out := streamOut{c: c, ctl: ctl, body: body, written: &written}
	// The head, until a chunk is answered: a cancel needs a message to
	// answer. Once it is used, the worker learns of a caller gone from its
	// next chunk or probe, which nobody receives once this call has
	// unsubscribed; a chunk waiting here unanswered carries it too.
	unanswered := first
	cancel := func() {
		if unanswered != nil && answer(unanswered, bus.StreamCancel) {
			return
		}
		for n, _, _ := sub.Pending(); n > 0; n-- {
			m, err := sub.NextMsg(time.Millisecond)
			if err != nil {
				return
			}
			if answer(m, bus.StreamCancel) {
				return
			}
		}
	}
	for {
		// A worker that has something to send sends it, and one waiting on
		// its backend probes every second: silence for streamSilence means
		// it is gone (a crash, a cut connection), well before the deadline.
		mctx, mcancel := context.WithTimeout(ctx, streamSilence)
		msg, err := nextOfStream(mctx, sub)
		silent := err != nil && ctx.Err() == nil && mctx.Err() != nil
		mcancel()
		if err != nil {
			if c.r.Context().Err() != nil {
				cancel()
				return errEnded
			}
			if silent {
				c.e.log.Warn("stream's worker went silent", "api", c.rt.api.Name, "request_id", c.id, "chunks", written)
				out.cut(bus.CodeBadGateway, "the worker relaying api "+c.rt.api.Name+"'s stream stopped answering")
				return errEnded
			}
			if errors.Is(err, nats.ErrSlowConsumer) {
				// More than the window allows: the worker is not
				// following the protocol.
				c.e.log.Warn("stream over its window", "api", c.rt.api.Name, "request_id", c.id, "chunks", written)
				out.cut(bus.CodeBadGateway, "the worker of api "+c.rt.api.Name+" sent past the stream's window")
				return errEnded
			}
			// The deadline (or a worker gone mid-stream): the caller has
			// what came, then a last element saying why it ends here, so
			// a cut stream is never mistaken for a whole one; the worker
			// stops at the same deadline.
			c.e.log.Debug("stream cut", "api", c.rt.api.Name, "request_id", c.id, "chunks", written, "err", err)
			out.cut(bus.CodeGatewayTimeout, "api "+c.rt.api.Name+" did not finish its stream within its deadline")
			return errEnded
		}
		switch bus.StreamKind(msg.Header) {
		case bus.StreamData:
			err := out.element(msg.Data)
			if err == nil {
				err = ctl.Flush()
			}
			if err != nil {
				if !answer(msg, bus.StreamCancel) {
					cancel()
				}
				return errEnded
			}
			written++
			// The worker asks for an ack every half window (the chunks
			// that carry a reply): how many the caller has been given.
			if msg.Reply != "" && answer(msg, strconv.Itoa(written)) {
				unanswered = nil
			}
		case bus.StreamEnd:
			switch msg.Header.Get(bus.HdrError) {
			case "":
				out.end()
			case string(bus.CodeGatewayTimeout): // the worker saw the deadline first
				out.cut(bus.CodeGatewayTimeout, "api "+c.rt.api.Name+" did not finish its stream within its deadline")
			default: // the worker could not go on: one code only, whatever it says
				out.cut(bus.CodeBadGateway, "the worker relaying api "+c.rt.api.Name+"'s stream could not go on")
			}
			return errEnded
		}
	}
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// firstOfStream sends the request and waits for the first message on the
// call's inbox, resending once in another wire version if the worker
// refuses this one (as bus.Request does).
func (c *call) firstOfStream(ctx context.Context, nc *nats.Conn, sub *nats.Subscription, m *nats.Msg, sent int) (*nats.Msg, error) {
	for try := 0; ; try++ {
		if err := nc.PublishMsg(m); err != nil {
			return nil, err
		}
		first, err := nextOfStream(ctx, sub)
		if err != nil {
			return nil, err
		}
		// No worker subscribed: the server's no-responders status.
		if len(first.Data) == 0 && first.Header.Get("Status") == "503" {
			return nil, nats.ErrNoResponders
		}
		if v, again := bus.WireRetry(first.Header, sent); again && try == 0 {
			bus.SetWire(m.Header, v)
			sent = v
			continue
		}
		return first, nil
	}
}

// nextOfStream is the next message on a stream inbox, less the worker's
// probes (which only need to reach this subscription).
func nextOfStream(ctx context.Context, sub *nats.Subscription) (*nats.Msg, error) {
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil || bus.StreamKind(m.Header) != bus.StreamPing {
			return m, err
		}
	}
}

// streamSilence is how long a stream may go without any message from its
// worker (which probes every second while it waits on its backend).
const streamSilence = 5 * time.Second

// streamCutGrace is how long the line that ends a cut stream may take to
// write: a caller that does not read it is let go then.
const streamCutGrace = time.Second

// streamError is a gateway error as the last element of a stream of the
// content type: an NDJSON line {"error": ...}, an SSE error event, or a
// JSON array's element {"error": ...} (its comma and "]" are streamOut's).
func streamError(contentType string, body streamBody, errJSON []byte) []byte {
	errJSON = bytes.TrimRight(errJSON, "\n")
	switch {
	case body == bodyArray:
		return append(append([]byte(`{"error":`), errJSON...), '}')
	case strings.HasPrefix(contentType, "text/event-stream"):
		return append(append([]byte("event: error\ndata: "), errJSON...), "\n\n"...)
	}
	return append(append([]byte(`{"error":`), errJSON...), "}\n"...)
}

var (
	arrayOpen  = []byte("[")
	arrayComma = []byte(",")
	arrayClose = []byte("]")
)

// streamOut writes a relayed stream's body to the caller: the chunks as
// they are (NDJSON, SSE), or as a JSON array's elements.
type streamOut struct {
	c       *call
	ctl     *http.ResponseController
	body    streamBody
	written *int // chunks written
}

// element writes one chunk (not flushed).
func (o streamOut) element(chunk []byte) error {
	if o.body == bodyArray && *o.written > 0 {
		if _, err := o.c.Write(arrayComma); err != nil {
			return err
		}
	}
	_, err := o.c.Write(chunk)
	return err
}

// end ends a whole stream: a JSON array's "]".
func (o streamOut) end() {
	if o.body == bodyArray {
		_, _ = o.c.Write(arrayClose)
		_ = o.ctl.Flush()
	}
}

// cut ends a stream that did not finish (its deadline, a worker gone or
// out of protocol) with a last element saying why, so a cut stream is
// never mistaken for a whole one, and counts the call with that code.
func (o streamOut) cut(code bus.Code, message string) {
	c := o.c
	c.code = code
	_ = o.ctl.SetWriteDeadline(time.Now().Add(streamCutGrace)) // past the call's own, for this last element only
	_ = o.element(streamError(c.Header().Get("Content-Type"), o.body, bus.ErrorJSON(code, message, c.id)))
	o.end()
	_ = o.ctl.Flush()
}
