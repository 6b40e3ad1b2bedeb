package bus

import (
	"strconv"

	"github.com/nats-io/nats.go"
)

// A stream is a reply of many messages: a gRPC server stream relayed to the
// caller message by message (NDJSON, SSE) instead of answered whole.
//
//	edge   → worker  request, HdrStream: the window W, reply subject: an
//	                 inbox of the edge's for this call only
//	worker → edge    "open": status and headers (as a reply), no body
//	worker → edge    "data": one chunk, reply subject: <the worker's ack
//	                 inbox>.<n> (one per chunk: NATS lets the edge's user
//	                 answer each reply subject once)
//	edge   → worker  the count of chunks written to the caller, as the answer
//	                 to a chunk, at least every W/2 chunks; "cancel" when
//	                 the caller went away
//	worker → edge    "end": the last message
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
	StreamCancel = "cancel"
	// StreamWindow is the window an edge grants.
	StreamWindow = 16
	// MaxStreamMessages bounds the messages of one stream: the worker's
	// NATS user may publish that many answers to one request
	// (RolePermissions), so a stream ends, with an error, before.
	MaxStreamMessages = 1 << 16
)

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
