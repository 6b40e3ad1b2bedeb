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
		ClientIP: "10.0.0.1", App: "shop", Deadline: dl}
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
	EncodeRequest(h, &Meta{RequestID: "r2"})
	if got := DecodeRequest(h); got.Method != "GET" || !got.Deadline.IsZero() || got.RequestID != "r2" || len(h) != 0 {
		t.Errorf("minimal request: %+v, headers left %v", got, h)
	}
}

func TestReplyCodec(t *testing.T) {
	h := EncodeReply(nats.Header{"Description": {"x"}}, 201)
	if r, ok := DecodeReply(h); !ok || r.Status != 201 || r.Code != "" {
		t.Errorf("reply %+v %v", r, ok)
	}
	if _, ok := h["Description"]; ok {
		t.Errorf("a backend's Description travels unescaped: %v", h)
	}
	e := ErrorReply(CodeOverloaded, "busy", "r3")
	if r, ok := DecodeReply(e.Header); !ok || r.Status != 503 || r.Code != CodeOverloaded {
		t.Errorf("error reply %+v %v", r, ok)
	}
	for _, bad := range []string{"", "abc", "99", "1000"} {
		if _, ok := DecodeReply(nats.Header{HdrStatus: {bad}}); ok {
			t.Errorf("status %q accepted", bad)
		}
	}
}
