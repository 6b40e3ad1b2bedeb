package bus

import (
	"net/textproto"
	"strings"
)

// hopHeaders are the hop-by-hop headers of RFC 9110 §7.6.1 (plus the
// legacy Proxy-Connection): they describe one connection, not the message,
// so they never cross the bus.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// HdrNatsTraceDest is the NATS server's message-tracing header, and
// NoMsgTrace the value that turns message tracing off for one message.
// The server inspects every message that carries a sampled W3C
// traceparent (for its own, account-level tracing, which Jetway does not
// use): it copies all the message's headers into a map first, ~30
// allocations per traced call. The edge sets NoMsgTrace on its traced
// requests, which the server checks without copying.
const (
	HdrNatsTraceDest = "Nats-Trace-Dest"
	NoMsgTrace       = "trace disabled"
)

// CleanHeaders removes, in place, the hop-by-hop headers, the headers named
// in Connection, and every header in the reserved wire namespace. h holds
// canonical header names (as net/http produces them).
func CleanHeaders(h map[string][]string) {
	for _, v := range h["Connection"] {
		for _, f := range strings.Split(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				delete(h, textproto.CanonicalMIMEHeaderKey(f))
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
	for k := range h {
		if IsReserved(k) {
			delete(h, k)
		}
	}
}

// Idempotent reports whether a call may be sent twice: its method is
// idempotent (RFC 9110 § 9.2.2), or the caller gave an Idempotency-Key
// (h in canonical form, as http.Header).
func Idempotent(method string, h map[string][]string) bool {
	switch method {
	case "GET", "HEAD", "OPTIONS", "PUT", "DELETE":
		return true
	}
	v := h["Idempotency-Key"]
	return len(v) > 0 && v[0] != ""
}
