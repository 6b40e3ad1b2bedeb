package bus

// HTTP header names on the wire.
//
// HTTP headers travel between edge and worker as NATS headers, but a NATS
// header block is not a free namespace: nats.go reads a header named Status
// (with Description) as the protocol's own status line, so an empty reply
// carrying "Status: 503" is taken for "no responders"; nats-server acts on
// Nats-* headers (Nats-Trace-Dest and Nats-Trace-Only redirect or swallow a
// message, the JetStream ones steer stores), on Nmqtt-* towards MQTT
// clients and on KV-Operation in key-value buckets; and Jetway-* is the
// wire's own metadata. An HTTP header with any of those names — in any
// letter case, as other NATS clients and future versions may fold case — is
// carried under HeaderEscape instead: "Status" travels as
// "Jetway-H-Status", "Jetway-H-X" as "Jetway-H-Jetway-H-X". Every other
// name, that is every ordinary header, travels as it is, at no cost.
//
// The mapping is total and exact: DecodeHeaderName(EncodeHeaderName(n))
// gives n back for every name, and a wire name decodes only if it is the
// encoding of some HTTP name, so no wire name can pass for another.
// Traceparent is not escaped: it is W3C trace context, which Jetway means
// NATS and its propagators to see.

// HeaderEscape prefixes an HTTP header name whose own spelling would collide
// with a name NATS or the wire treat specially. It is inside the reserved
// prefix HeaderPrefix, so no caller or backend can send it.
const HeaderEscape = HeaderPrefix + "H-"

// Collides reports whether an HTTP header name, as it is, would be read as
// something else than an HTTP header in a NATS header block.
func Collides(name string) bool {
	switch len(name) {
	case len("Status"):
		if equalFold(name, "Status") {
			return true
		}
	case len("Description"):
		if equalFold(name, "Description") {
			return true
		}
	case len("KV-Operation"):
		if equalFold(name, "KV-Operation") {
			return true
		}
	}
	return hasPrefixFold(name, "Nats-") || hasPrefixFold(name, "Nmqtt-") || hasPrefixFold(name, HeaderPrefix)
}

// EncodeHeaderName returns the NATS header name that carries the HTTP
// header name. It allocates only for a colliding name.
func EncodeHeaderName(name string) string {
	if Collides(name) {
		return HeaderEscape + name
	}
	return name
}

// DecodeHeaderName returns the HTTP header name a NATS header name carries,
// and false for a name that carries none: the wire's own metadata, the
// protocol's names, and any spelling EncodeHeaderName never produces.
func DecodeHeaderName(wire string) (string, bool) {
	if !Collides(wire) {
		return wire, true
	}
	if len(wire) > len(HeaderEscape) && wire[:len(HeaderEscape)] == HeaderEscape {
		if name := wire[len(HeaderEscape):]; Collides(name) {
			return name, true
		}
	}
	return "", false
}

// escaped is one header moved under another name by EncodeHTTPHeaders or
// DecodeHTTPHeaders.
type escaped struct {
	name string
	vs   []string
}

// EncodeHTTPHeaders renames, in place, the HTTP headers of h whose names
// collide (EncodeHeaderName), so h can go out as the HTTP part of a NATS
// header block. Add the wire metadata after it, never before: a Jetway-*
// name present in h is taken for an HTTP header and escaped.
func EncodeHTTPHeaders(h map[string][]string) {
	var buf [4]escaped
	moved := buf[:0]
	for k, vs := range h {
		if Collides(k) {
			moved = append(moved, escaped{k, vs})
		}
	}
	// Take every colliding name out before putting any back: an escaped
	// name may equal a name still waiting to be escaped itself.
	for _, e := range moved {
		delete(h, e.name)
	}
	for _, e := range moved {
		h[HeaderEscape+e.name] = e.vs
	}
}

// DecodeHTTPHeaders turns, in place, a received NATS header block into the
// HTTP headers it carries: escaped names get their own back, and every name
// that carries no HTTP header (the wire metadata, the protocol's Status,
// Nats-* added by the server) is removed. Read the wire metadata first.
func DecodeHTTPHeaders(h map[string][]string) {
	var buf [4]escaped
	moved := buf[:0]
	for k, vs := range h {
		if !Collides(k) {
			continue // an ordinary header: it stays as it is
		}
		if name, ok := DecodeHeaderName(k); ok {
			moved = append(moved, escaped{name, vs})
		}
		delete(h, k)
	}
	// Every colliding name is out, so a decoded one overwrites nothing.
	for _, e := range moved {
		h[e.name] = e.vs
	}
}

// equalFold is strings.EqualFold for ASCII, for names of equal length.
func equalFold(s, t string) bool {
	for i := 0; i < len(t); i++ {
		if lower(s[i]) != lower(t[i]) {
			return false
		}
	}
	return true
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && equalFold(s[:len(prefix)], prefix)
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
