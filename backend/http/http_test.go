package httpbackend

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/jetway-gw/jetway/backend"
)

func TestURLTemplate(t *testing.T) {
	for _, tc := range []struct {
		tmpl, params, query, want string
	}{
		{"http://h/x", "", "", "http://h/x"},
		{"http://h/x", "", "a=1", "http://h/x?a=1"},
		{"http://h/x?fixed=1", "", "a=1", "http://h/x?fixed=1&a=1"},
		{"http://h/o/{id}", "id=42", "", "http://h/o/42"},
		{"http://h/o/{id}/i/{item}", "id=a%2520b&item=7", "q=%2F", "http://h/o/a%20b/i/7?q=%2F"},
		{"http://h/files/{*}", "%2A=a%2Fb%2Fc", "", "http://h/files/a/b/c"},
	} {
		u := compileURL(tc.tmpl)
		if got := u.expand(&backend.Request{RawParams: tc.params, RawQuery: tc.query}); got != tc.want {
			t.Errorf("%s with %q %q = %q, want %q", tc.tmpl, tc.params, tc.query, got, tc.want)
		}
	}
}

// A backend's response headers come out of fasthttp's buffers whole: every
// value of a repeated name in order, names common or not, and nothing of
// one value bleeds into another although they share one string.
func TestResponseHeader(t *testing.T) {
	var fh fasthttp.ResponseHeader
	fh.SetNoDefaultContentType(true)
	fh.Set("Content-Type", "application/json")
	fh.Add("Set-Cookie", "a=1")
	fh.Add("Set-Cookie", "b=2")
	fh.Add("X-Odd-Name", "")
	fh.Add("X-Trace", "t-1")
	got := responseHeader(&fh)
	want := http.Header{
		"Content-Type": {"application/json"},
		"Set-Cookie":   {"a=1", "b=2"},
		"X-Odd-Name":   {""},
		"X-Trace":      {"t-1"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("headers %v, want %v", got, want)
	}
	// Appending to one name's list never writes into another's.
	got["X-Trace"] = append(got["X-Trace"], "t-2")
	if got.Get("X-Odd-Name") != "" || len(got["Set-Cookie"]) != 2 {
		t.Fatalf("an append changed another header: %v", got)
	}
}

// A path that climbs (a dot segment, in any encoding) never reaches a URL
// with {request.path}: the edge sends only canonical paths, and a worker
// does not take another's word for it.
func TestPlainPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/v2/orders/caf%C3%A9": true, "/a": true,
		"/a/../b": false, "/a/./b": false, "//a": false, "/a/": true, "/": true, "/a//b": false, "a": false, "/a/%2e%2E/b": false,
		"/a%2fb": false, "/a\\b": false, "/..": false,
	} {
		if got := plainPath(p); got != want {
			t.Errorf("plainPath(%q) = %v, want %v", p, got, want)
		}
	}
}
