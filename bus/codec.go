package bus

import (
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// Meta is what travels with a call on the bus besides its HTTP headers and
// body: set by the edge (or by a worker calling another API as a fallback),
// read by the worker that serves the call.
type Meta struct {
	Method    string
	Path      string // the canonical escaped path the edge routed on
	RawQuery  string // without '?'
	RawParams string // route parameters, URL-query encoded
	RequestID string
	ClientIP  string    // the caller's address as the edge saw it
	App       string    // the authenticated app; "" for an open API
	Host      string    // the Host a rewrite sends the backend; "": the backend URL's
	Deadline  time.Time // zero: none (the API's own timeout applies)
	Wire      int       // the wire version the request is written in
	Stream    int       // the window of a caller that takes a stream (stream.go); 0: one reply
}

// EncodeRequest makes h, the HTTP request headers for the backend (already
// cleaned of hop-by-hop and reserved names by the caller), into the headers
// of a request message: the names that NATS would read as its own travel
// escaped (EncodeHTTPHeaders), then m is added under the reserved names.
// It changes and returns h; ordinary headers cost no allocation.
func EncodeRequest(h nats.Header, m *Meta) nats.Header {
	EncodeHTTPHeaders(h)
	// One array backs every metadata value: one allocation, not one each.
	vals := make([]string, 0, 10)
	set := func(name, v string) {
		vals = append(vals, v)
		h[name] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set(HdrMethod, m.Method)
	set(HdrPath, m.Path)
	if m.RawQuery != "" {
		set(HdrQuery, m.RawQuery)
	}
	if m.RawParams != "" {
		set(HdrParams, m.RawParams)
	}
	set(HdrRequestID, m.RequestID)
	if m.ClientIP != "" {
		set(HdrClientIP, m.ClientIP)
	}
	if m.App != "" {
		set(HdrApp, m.App)
	}
	if m.Host != "" {
		set(HdrHost, m.Host)
	}
	if !m.Deadline.IsZero() {
		set(HdrDeadline, strconv.FormatInt(m.Deadline.UnixNano(), 10))
	}
	if m.Stream > 0 {
		set(HdrStream, strconv.Itoa(m.Stream))
	}
	SetWire(h, m.Wire)
	return h
}

// DecodeRequest reads a request message's metadata and turns its headers,
// in place, back into the HTTP request headers (the wire's own names and
// any NATS name the sender did not escape are dropped). A missing method is
// GET; a deadline that does not parse is none. A version this node does
// not read is a WIRE_VERSION error: a worker checks it with WireOf before
// anything else; DecodeRequest then reads the rest.
func DecodeRequest(h nats.Header) Meta {
	m := Meta{
		Method:    first(h, HdrMethod),
		Path:      first(h, HdrPath),
		RawQuery:  first(h, HdrQuery),
		RawParams: first(h, HdrParams),
		RequestID: first(h, HdrRequestID),
		ClientIP:  first(h, HdrClientIP),
		App:       first(h, HdrApp),
		Host:      first(h, HdrHost),
	}
	if m.Method == "" {
		m.Method = "GET"
	}
	m.Wire, _ = WireOf(h)
	m.Deadline = RequestDeadline(h)
	m.Stream = StreamWindowOf(h)
	DecodeHTTPHeaders(h)
	return m
}

// RequestDeadline is the deadline a request message carries (zero: none or
// malformed), read without decoding the rest: a worker drops a call whose
// caller has given up before it does anything else.
func RequestDeadline(h nats.Header) time.Time {
	if v := first(h, HdrDeadline); v != "" {
		if ns, err := strconv.ParseInt(v, 10, 64); err == nil {
			return time.Unix(0, ns)
		}
	}
	return time.Time{}
}

// EncodeReply makes h, a backend's HTTP response headers (cleaned by the
// caller), into the headers of a reply message with the status. A reply is
// written in the wire version of the request it answers, which its reader
// wrote, so it does not say it.
func EncodeReply(h nats.Header, status int) nats.Header {
	EncodeHTTPHeaders(h) // a backend's Status must not pass for the protocol's
	if status >= 100 && status < len(statusValues) {
		h[HdrStatus] = statusValues[status]
	} else {
		h[HdrStatus] = []string{strconv.Itoa(status)}
	}
	return h
}

// statusValues are the HdrStatus values of the statuses 100 to 599, shared
// (never changed) so that a reply's status costs no allocation.
var statusValues = func() (v [600][]string) {
	for s := 100; s < len(v); s++ {
		v[s] = []string{strconv.Itoa(s)}
	}
	return v
}()

// ErrorReply is the reply message of a gateway-made error: the code's
// status, the code, and the JSON body a caller receives. Its form is the
// same in every wire version, so a WIRE_VERSION refusal reaches a sender
// of any version.
func ErrorReply(code Code, msg, requestID string) *nats.Msg {
	return &nats.Msg{
		Header: nats.Header{
			HdrStatus:      []string{strconv.Itoa(code.Status())},
			HdrError:       []string{string(code)},
			"Content-Type": []string{"application/json"},
		},
		Data: ErrorJSON(code, msg, requestID),
	}
}

// Reply is what a reply message says besides its HTTP headers and body.
type Reply struct {
	Status int  // the HTTP status
	Code   Code // set only on a gateway-made error
	// Outcome is the worker's classify verdict (OutcomeFailed, OutcomeOK),
	// "" when the API has no classify block.
	Outcome string
}

// The HdrOutcome values.
const (
	OutcomeFailed = "failed"
	OutcomeOK     = "ok"
)

// The HdrOutcome values as header values, shared (never changed).
var outcomeFailed, outcomeOK = []string{OutcomeFailed}, []string{OutcomeOK}

// ReplyFailed reports whether a reply of a backend's answer failed: the
// worker's classify verdict when it gives one, else a 5xx.
func ReplyFailed(rep Reply) bool {
	switch rep.Outcome {
	case OutcomeFailed:
		return true
	case OutcomeOK:
		return false
	}
	return rep.Status >= 500
}

// SetOutcome marks a reply with the worker's classify verdict.
func SetOutcome(h nats.Header, failed bool) {
	if failed {
		h[HdrOutcome] = outcomeFailed
	} else {
		h[HdrOutcome] = outcomeOK
	}
}

// DecodeReply reads a reply message's status and error code; a reply
// without a valid status is malformed, a BAD_GATEWAY *Error. The HTTP
// headers stay in h under their wire names: DecodeHeaderName gives each
// its HTTP name (or says to drop it), so a caller copies them without a
// second map.
func DecodeReply(h nats.Header) (Reply, error) {
	status, err := strconv.Atoi(first(h, HdrStatus))
	if err != nil || status < 100 || status > 999 {
		return Reply{}, errMalformedReply
	}
	return Reply{Status: status, Code: Code(first(h, HdrError)), Outcome: first(h, HdrOutcome)}, nil
}

var errMalformedReply = Errorf(CodeBadGateway, "malformed reply from worker")

// first is h's first value of a name given in canonical form (the wire's
// names are), without the canonicalisation nats.Header.Get does.
func first(h nats.Header, name string) string {
	if vs := h[name]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}
