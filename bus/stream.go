package bus

import (
	"strconv"

	"github.com/nats-io/nats.go"
)

// A stream is a reply of many messages: a gRPC server stream relayed to the
// caller message by message (NDJSON, SSE) instead of answered whole.
//
//	edge   → worker  request, HdrStream: the window W, reply subject: an
//	                 inbox of the edge's for this call only (StreamInboxPrefix)
//	worker → edge    "ping", every second nothing else went: a message
//	                 nobody receives comes back to the worker as NATS's
//	                 no-responders status, and the worker stops the call
//	worker → edge    "open": status and headers (as a reply), no body
//	worker → edge    "open" carries the reply subject <ack inbox>.h, on
//	                 which the edge may always answer "cancel"
//	worker → edge    "data": one chunk; every W/2-th carries the reply
//	                 subject <ack inbox>.<n> (a subject per ack: NATS lets
//	                 the edge's user answer each reply subject once)
//	edge   → worker  the count of chunks written to the caller, as the answer
//	                 to such a chunk; "cancel" when the caller went away.
//	                 The edge answers only under the head's ack inbox.
//	worker → edge    "end": the last message; its HdrError, when set
//	                 (GATEWAY_TIMEOUT, BAD_GATEWAY), says the stream was cut
//
// The worker never has more than W chunks sent and not acknowledged, so a
// caller that reads slowly slows the backend's stream instead of filling
// the edge's memory; everything ends at the call's deadline. A request
// without HdrStream (an edge before streams) and a worker before streams
// (which ignores the header and answers once) both fall back to a single
// reply, which the edge also takes on its stream inbox.
const (
	HdrStream    = HeaderPrefix + "Stream"
	StreamOpen   = "open"
	StreamData   = "data"
	StreamEnd    = "end"
	StreamPing   = "ping" // the worker asking whether the edge still listens; not answered
	StreamCancel = "cancel"
	// StreamInboxPrefix starts the inbox an edge takes a stream on:
	// <prefix>.<32 random hex digits>. Workers may publish there (a stream
	// is many messages, and NATS lets a worker answer a request once), and
	// only there: the random token is the capability, as no worker can
	// subscribe to an edge's inboxes to learn one.
	StreamInboxPrefix = InboxPrefixEdge + ".s"
	// StreamWindow is the window an edge grants.
	StreamWindow = 16
	// MaxStreamMessages bounds the messages of one stream.
	MaxStreamMessages = 1 << 16
)

// IsStreamInbox reports whether a reply subject is an edge's stream inbox.
func IsStreamInbox(subject string) bool {
	return len(subject) > len(StreamInboxPrefix)+1 && subject[:len(StreamInboxPrefix)+1] == StreamInboxPrefix+"."
}

// StreamWindowOf is the window a request grants (0: it takes no stream),
// clamped to [1, MaxStreamMessages].
func StreamWindowOf(h nats.Header) int {
	v := first(h, HdrStream)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0
	}
	return min(n, MaxStreamMessages)
}

// StreamKind is what a message of a stream is: StreamOpen, StreamData,
// StreamEnd, or "" for a single reply.
func StreamKind(h nats.Header) string { return first(h, HdrStream) }
