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
