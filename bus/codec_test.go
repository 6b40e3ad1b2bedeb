package bus

import (
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestRequestCodecRoundTrip(t *testing.T) {
	dl := time.Unix(0, time.Now().UnixNano())
	in := Meta{Method: "POST", Path: "/v1/a%2Fb", RawQuery: "q=1", RawParams: "id=7", RequestID: "r1",
		ClientIP: "10.0.0.1", App: "shop", Deadline: dl, Wire: WireVersion}
	h := nats.Header{"Status": {"teapot"}, "X-Custom": {"a", "b"}}
	m := in
	EncodeRequest(h, &m)
	if _, ok := h["Status"]; ok {
		t.Fatalf("an HTTP Status header travels unescaped: %v", h)
	}
	got := DecodeRequest(h)
	if !reflect.DeepEqual(got, in) {
		t.Errorf("meta %+v, want %+v", got, in)
	}
	if want := (nats.Header{"Status": {"teapot"}, "X-Custom": {"a", "b"}}); !reflect.DeepEqual(h, want) {
		t.Errorf("HTTP headers after decoding %v, want %v", h, want)
	}
	// The fewest fields: a GET with no deadline.
	h = nats.Header{}
	EncodeRequest(h, &Meta{RequestID: "r2", Wire: 1})
	if got := DecodeRequest(h); got.Method != "GET" || !got.Deadline.IsZero() || got.RequestID != "r2" || got.Wire != 1 || len(h) != 0 {
		t.Errorf("minimal request: %+v, headers left %v", got, h)
	}
}

func TestReplyCodec(t *testing.T) {
	h := EncodeReply(nats.Header{"Description": {"x"}}, 201)
	if r, err := DecodeReply(h); err != nil || r.Status != 201 || r.Code != "" {
		t.Errorf("reply %+v %v", r, err)
	}
	if _, ok := h["Description"]; ok {
		t.Errorf("a backend's Description travels unescaped: %v", h)
	}
	e := ErrorReply(CodeOverloaded, "busy", "r3")
	if r, err := DecodeReply(e.Header); err != nil || r.Status != 503 || r.Code != CodeOverloaded {
		t.Errorf("error reply %+v %v", r, err)
	}
	for _, bad := range []string{"", "abc", "99", "1000"} {
		if _, err := DecodeReply(nats.Header{HdrStatus: {bad}}); !isCode(err, CodeBadGateway) {
			t.Errorf("status %q: %v, want BAD_GATEWAY", bad, err)
		}
	}
}

func isCode(err error, c Code) bool {
	ge, ok := err.(*Error)
	return ok && ge.Code == c
}

// A node reads its own wire version and the one before: version 1 is a
// request without the header, as the releases before the version wrote.
// Anything else is WIRE_VERSION, never a guess at what the request means.
func TestWireVersions(t *testing.T) {
	for v := WireMinVersion; v <= WireVersion; v++ {
		h := nats.Header{}
		SetWire(h, v)
		if got, err := WireOf(h); err != nil || got != v {
			t.Errorf("version %d read back as %d, %v", v, got, err)
		}
	}
	if _, ok := EncodeRequest(nats.Header{}, &Meta{Wire: 1})[HdrWire]; ok {
		t.Error("a version 1 request carries the header the previous release never wrote")
	}
	for _, bad := range [][]string{{"3"}, {"0"}, {"-1"}, {""}, {"2x"}, {"99999999999999999999"}, {"2", "2"}} {
		h := nats.Header{HdrWire: bad}
		if _, err := WireOf(h); !isCode(err, CodeWireVersion) {
			t.Errorf("version %q: %v, want WIRE_VERSION", bad, err)
		}
	}
}

// A WIRE_VERSION refusal says what the worker reads; the sender writes the
// request again in the newest version both read, unless that is what it
// sent or there is none.
func TestWireRetry(t *testing.T) {
	refusal := func(reads string) nats.Header {
		h := ErrorReply(CodeWireVersion, "no", "r").Header
		if reads != "" {
			h[HdrWireReads] = []string{reads}
		}
		return h
	}
	for _, c := range []struct {
		h    nats.Header
		sent int
		want int
	}{
		{refusal("2-3"), 1, 2},
		{refusal("1-1"), 2, 1},
		{WireRefusal(Errorf(CodeWireVersion, "x"), "r").Header, 3, WireVersion},
		{refusal("2-3"), 2, 0},                            // what was sent: no second try
		{refusal("3-4"), 2, 0},                            // none in common
		{refusal(""), 1, 0},                               // says nothing
		{refusal("x-2"), 1, 0},                            // malformed
		{ErrorReply(CodeOverloaded, "", "").Header, 1, 0}, // another refusal
	} {
		v, ok := WireRetry(c.h, c.sent)
		if ok != (c.want != 0) || v != c.want {
			t.Errorf("refusal %v of a version %d request: retry in %d %v, want %d", c.h, c.sent, v, ok, c.want)
		}
	}
}

// Requests are written in the highest version every live worker reads: a
// node starts in the oldest, moves up once it has heard the workers, and
// goes back down when a worker of the previous release (whose beats carry
// no version) is live.
func TestWireVersionsFollowWorkers(t *testing.T) {
	if (*WireVersions)(nil).Send() != WireVersion {
		t.Error("a nil chooser does not write this release's version")
	}
	tr := NewTracker(nil, time.Second)
	now := time.Now()
	if _, ok := tr.WireFloor(now); ok {
		t.Error("a floor without workers")
	}
	tr.observe(Heartbeat{ID: "e", Role: "edge"}, now) // edges do not count
	tr.observe(Heartbeat{ID: "w1", Role: "worker", Wire: WireVersion}, now)
	if v, ok := tr.WireFloor(now); !ok || v != WireVersion {
		t.Errorf("floor %d %v, want %d", v, ok, WireVersion)
	}
	tr.observe(Heartbeat{ID: "w0", Role: "serve"}, now)
	if v, _ := tr.WireFloor(now); v != 1 {
		t.Errorf("floor %d with a worker of the previous release, want 1", v)
	}
	if v, ok := tr.WireFloor(now.Add(5 * time.Second)); ok {
		t.Errorf("dead workers count: floor %d", v)
	}
	tr.observe(Heartbeat{ID: "w0", Stopping: true}, now)
	if v, _ := tr.WireFloor(now); v != WireVersion {
		t.Errorf("floor %d after the old worker stopped, want %d", v, WireVersion)
	}
	if NewWireVersions().Send() != WireMinVersion {
		t.Error("a new chooser does not start at the oldest version")
	}
}
