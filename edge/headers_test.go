package edge_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// natsNamed are HTTP headers spelled like names NATS reads as its own: the
// status line nats.go builds (Status, Description; an empty message with
// Status 503 is "no responders"), and headers nats-server acts on.
var natsNamed = [][2]string{
	{"Status", "503"},
	{"Status", "100"},
	{"Description", "x"},
	{"Nats-Msg-Id", "m-1"},
	{"Nats-Expected-Stream", "orders"},
	{"Nats-Trace-Only", "true"}, // the server would trace the message and not deliver it
	{"Nats-Trace-Dest", "trace.sink"},
}

// A backend's response headers are HTTP headers, whatever their names: an
// empty 200 carrying "Status: 503" is a 200, not "no workers".
func TestResponseHeadersNamedLikeNATS(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("name")
		w.Header()[name] = []string{r.URL.Query().Get("value")}
		w.Header()["Jetway-H-Status"] = []string{"503"} // reserved: dropped, never decoded
		w.WriteHeader(http.StatusOK)
	}))
	defer backend.Close()
	g := newGateway(t)
	g.Publish(`{"name":"rh","pool":"p","route":{"path":"/rh"},"backend":{"type":"http","url":"` + backend.URL + `"}}`)
	cases := append(natsNamed, [2]string{"status", "503"}, [2]string{"Nats-Service-Error", "boom"})
	for _, c := range cases {
		r := g.Do("GET", "/rh?name="+c[0]+"&value="+c[1], nil)
		if r.Status != 200 || r.Body != "" || r.Code != "" {
			t.Errorf("backend header %s: %s: client got %d %q, want the backend's empty 200", c[0], c[1], r.Status, r.Body)
			continue
		}
		if got := r.Header[http.CanonicalHeaderKey(c[0])]; len(got) != 1 || got[0] != c[1] {
			t.Errorf("backend header %s: %s: client got %v in %v", c[0], c[1], got, r.Header)
		}
		if !strings.EqualFold(c[0], "Status") && r.Header.Get("Status") != "" {
			t.Errorf("backend header %s: a Status appeared: %v", c[0], r.Header)
		}
		for k := range r.Header {
			if strings.HasPrefix(k, "Jetway-") {
				t.Errorf("reserved header %s reached the client", k)
			}
		}
	}
}

// A caller's request headers named like NATS's own reach the backend as
// sent: they are the caller's HTTP headers, carried escaped on the bus.
func TestRequestHeadersNamedLikeNATS(t *testing.T) {
	seen := make(chan http.Header, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
	}))
	defer backend.Close()
	g := newGateway(t)
	g.Publish(`{"name":"qh","pool":"p","route":{"path":"/qh"},"timeout":"2s","backend":{"type":"http","url":"` + backend.URL + `"}}`)
	// Unescaped, this pair makes nats-server send a trace of the request
	// to the caller's subject and not deliver it at all.
	r := g.Do("GET", "/qh", nil, "Nats-Trace-Dest", "trace.sink", "Nats-Trace-Only", "true")
	if r.Status != 200 {
		t.Fatalf("request with Nats-Trace-Dest and Nats-Trace-Only: got %d %s", r.Status, r.Code)
	}
	if in := <-seen; in.Get("Nats-Trace-Dest") != "trace.sink" || in.Get("Nats-Trace-Only") != "true" {
		t.Errorf("backend saw %v", in)
	}
	for _, c := range natsNamed {
		r := g.Do("GET", "/qh", nil, c[0], c[1], "Jetway-H-Description", "forged")
		if r.Status != 200 {
			t.Errorf("request header %s: %s: got %d %s", c[0], c[1], r.Status, r.Code)
			continue
		}
		in := <-seen
		if got := in[c[0]]; len(got) != 1 || got[0] != c[1] {
			t.Errorf("request header %s: %s: backend saw %v in %v", c[0], c[1], got, in)
		}
		if c[0] != "Description" && in.Get("Description") != "" || in.Get("Jetway-H-Description") != "" {
			t.Errorf("a caller's Jetway-H-* header got through: %v", in)
		}
	}
}

// The fallback to another API is a second encoder: the same holds there.
func TestFallbackAPIHeadersNamedLikeNATS(t *testing.T) {
	seen := make(chan http.Header, 1)
	alt := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		w.Header().Set("Status", "503")
		w.WriteHeader(http.StatusOK)
	}))
	defer alt.Close()
	be := newFlaky(t)
	be.failing.Store(true)
	g := newGateway(t)
	g.Publish(`{"name":"fbh.alt","pool":"p","route":{"path":"/fbh/alt"},"backend":{"type":"http","url":"` + alt.URL + `"}}`)
	g.Publish(`{"name":"fbh.api","pool":"p","route":{"path":"/fbh/api"},"backend":{"type":"http","url":"` + be.URL + `"},
		"fallback":{"api":"fbh.alt"}}`)
	r := g.Do("GET", "/fbh/api", nil, "Nats-Trace-Only", "true")
	if r.Status != 200 || r.Header.Get("X-Jetway-Fallback") != "api fbh.alt" || r.Header.Get("Status") != "503" {
		t.Fatalf("api fallback: %d %q %v", r.Status, r.Body, r.Header)
	}
	// The first call went to the failing backend; the alternative got
	// the caller's header through the worker's own request.
	if in := <-seen; in.Get("Nats-Trace-Only") != "true" {
		t.Errorf("fallback API's backend saw %v", in)
	}
}
