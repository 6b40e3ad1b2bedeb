package bus

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Header names of the wire between edge and worker. A request travels as NATS
// headers plus the raw body; a reply likewise. Jetway's own headers share the
// reserved prefix HeaderPrefix; every other header of a request is an HTTP
// request header passed to the backend, every other header of a reply an HTTP
// response header passed to the client.
//
// HTTP headers that arrive at the edge with the reserved prefix are dropped,
// so a caller can never forge wire metadata; likewise backend response
// headers with the prefix are dropped by the worker. HTTP headers whose
// names NATS itself reads (Status, Nats-*, ...) travel escaped, see
// EncodeHeaderName.
const (
	HeaderPrefix = "Jetway-"

	// Request metadata, set by the edge.
	HdrMethod    = "Jetway-Method"     // HTTP method
	HdrPath      = "Jetway-Path"       // request path as received (escaped form)
	HdrQuery     = "Jetway-Query"      // raw query string, without '?'
	HdrParams    = "Jetway-Params"     // route parameters, URL-query encoded
	HdrRequestID = "Jetway-Request-Id" // request id, also sent to backends as X-Request-Id
	HdrDeadline  = "Jetway-Deadline"   // absolute deadline, Unix nanoseconds
	HdrApp       = "Jetway-App"        // authenticated app id, if any
	HdrClientIP  = "Jetway-Client-Ip"  // client address as the edge saw it
	HdrHost      = "Jetway-Host"       // the Host a rewrite sends the backend (registry.RequestRewrite.Host)

	// HdrWire is the wire version a request is written in (WireVersion);
	// a request without it is version 1. A reply is in its request's.
	HdrWire = "Jetway-Wire"
	// HdrWireReads, on a WIRE_VERSION refusal, is the versions the
	// refusing worker reads, "<oldest>-<newest>": the sender writes the
	// request again in one of them (WireRetry).
	HdrWireReads = "Jetway-Wire-Reads"

	// Reply metadata, set by the worker.
	HdrStatus = "Jetway-Status" // HTTP status of the reply
	HdrError  = "Jetway-Error"  // set only on gateway-made errors: the error code
	// HdrOutcome is the API's classify verdict on a backend's answer:
	// OutcomeFailed or OutcomeOK; absent for an API without classify (the
	// edge then goes by the status). An edge that does not know it drops
	// it with the other reserved names.
	HdrOutcome = "Jetway-Outcome"

	// HdrTraceparent carries W3C trace context; it is not prefixed so that
	// standard propagators find it.
	HdrTraceparent = "Traceparent"
)

// IsReserved reports whether an HTTP header name is in the reserved wire
// namespace, in any letter case: a backend's "jetway-outcome" is as
// reserved as "Jetway-Outcome" (a header map need not be canonical).
func IsReserved(name string) bool {
	return len(name) >= len(HeaderPrefix) && equalFold(name[:len(HeaderPrefix)], HeaderPrefix)
}

// Wire versions. A node reads the messages of its own version and of the
// one before (WireMinVersion), so edges and workers of two releases in a
// row can serve calls together during a rolling upgrade. Which version a
// node sends is chosen by a WireVersions (below): the highest every live
// worker reads, as their heartbeats say. A worker answers in the version
// it was asked in, so a reply does not say its version. Heartbeats can be
// late (a node just started, a worker just subscribed) or forged (any
// worker may beat under any worker id), so they only save a round trip: a
// worker refuses a version it does not read before it admits the call,
// saying which it reads, and the sender writes the call again in one of
// them, once (WireRetry).
//
//	1  releases before the version was carried: no Jetway-Wire header.
//	2  the header is carried; workers say their version in heartbeats.
const (
	WireVersion    = 2
	WireMinVersion = 1
)

// wireValues are the header values of each version, shared so that
// setting one costs no allocation. Version 1 has none.
var wireValues = [WireVersion + 1][]string{2: {"2"}}

// SetWire marks h as written in version v (a version this node reads).
func SetWire(h map[string][]string, v int) {
	if v > WireMinVersion && v <= WireVersion {
		h[HdrWire] = wireValues[v]
	} else {
		delete(h, HdrWire)
	}
}

// wireReads is what this node reads, as HdrWireReads says it.
var wireReads = []string{strconv.Itoa(WireMinVersion) + "-" + strconv.Itoa(WireVersion)}

// WireRefusal is a worker's answer to a request in a version it does not
// read: WIRE_VERSION, saying which versions it reads.
func WireRefusal(err error, requestID string) *nats.Msg {
	msg := "wire version not read by this worker"
	if ge, ok := err.(*Error); ok {
		msg = ge.Message
	}
	m := ErrorReply(CodeWireVersion, msg, requestID)
	m.Header[HdrWireReads] = wireReads
	return m
}

// Request sends a request message written in wire version sent (its
// headers encoded by EncodeRequest) and waits for the reply within ctx.
// A worker a release apart that refuses the version before admitting the
// call gets it once more, in a version both read (WireRetry): the one
// place edges and workers' fallbacks do so. A worker forging a refusal
// gains no more than another worker serving the call, once.
func Request(ctx context.Context, nc *nats.Conn, m *nats.Msg, sent int) (*nats.Msg, error) {
	reply, err := nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return nil, err
	}
	if v, again := WireRetry(reply.Header, sent); again {
		SetWire(m.Header, v)
		return nc.RequestMsgWithContext(ctx, m)
	}
	return reply, nil
}

// WireRetry tells, for a reply to a request written in version sent,
// whether it is a WIRE_VERSION refusal that a request in another version
// would pass, and in which: the newest both sides read.
func WireRetry(reply nats.Header, sent int) (int, bool) {
	if first(reply, HdrError) != string(CodeWireVersion) {
		return 0, false
	}
	lo, hi, ok := strings.Cut(first(reply, HdrWireReads), "-")
	if !ok {
		return 0, false
	}
	oldest, err1 := strconv.Atoi(lo)
	newest, err2 := strconv.Atoi(hi)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	v := min(newest, WireVersion)
	if v < max(oldest, WireMinVersion) || v == sent {
		return 0, false
	}
	return v, true
}

// WireOf is the version a request's headers say it is written in: 1
// without the header. Any version this node does not read (newer, older
// or malformed) is a WIRE_VERSION error.
func WireOf(h map[string][]string) (int, error) {
	vs := h[HdrWire]
	if len(vs) == 0 {
		return WireMinVersion, nil
	}
	v, err := strconv.Atoi(vs[0])
	if err != nil || len(vs) > 1 || v < WireMinVersion || v > WireVersion {
		return 0, Errorf(CodeWireVersion, fmt.Sprintf("message in wire version %.8q; this node reads versions %d to %d", vs[0], WireMinVersion, WireVersion))
	}
	return v, nil
}

// WireVersions chooses the version a node writes requests in: the highest
// one every live worker reads (Tracker.WireFloor). It starts at
// WireMinVersion, which the workers of this release and of the previous
// one read, and moves only after Follow has listened to the cluster's
// heartbeats for DeadAfter periods, long enough to have heard every live
// worker. A nil *WireVersions writes WireVersion: every peer is of this
// release (a test, one process).
type WireVersions struct{ send atomic.Int32 }

// NewWireVersions returns a chooser writing WireMinVersion.
func NewWireVersions() *WireVersions {
	w := &WireVersions{}
	w.send.Store(WireMinVersion)
	return w
}

// Send is the version to write a request in now.
func (w *WireVersions) Send() int {
	if w == nil {
		return WireVersion
	}
	return int(w.send.Load())
}

// Follow keeps Send at the tracked workers' floor until ctx ends: it waits
// DeadAfter periods, then looks every quarter period. With no live worker
// it keeps what it has, so a worker of the previous release that starts
// next is never written to in a version it cannot read.
func (w *WireVersions) Follow(ctx context.Context, t *Tracker) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(DeadAfter * t.period):
	}
	tick := time.NewTicker(t.period / 4)
	defer tick.Stop()
	for {
		if v, ok := t.WireFloor(time.Now()); ok {
			w.send.Store(int32(min(max(v, WireMinVersion), WireVersion)))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
