package edge

import (
	"net/url"
	"strings"
	"testing"
)

func TestCheckPath(t *testing.T) {
	for p, ok := range map[string]bool{
		"/":                 true,
		"/v1/orders/42":     true,
		"/v1/orders/a%20b":  true,
		"/v1/x/":            true,
		"/v1/caf%C3%A9":     true,
		"":                  false,
		"v1":                false,
		"/v1//x":            false,
		"/v1/../admin":      false,
		"/v1/./x":           false,
		"/v1/..":            false,
		"/v1/%2e%2e/admin":  false,
		"/v1/%2E./admin":    false,
		"/v1/a%2Fb":         false,
		"/v1/a%5Cb":         false,
		"/v1/a\\b":          false,
		"/v1/a%00b":         false,
		"/v1/a%0d%0aX:%20y": false,
		"/v1/%zz":           false,
		"/v1/a\x7fb":        false,
	} {
		if got := checkPath(p); got != ok {
			t.Errorf("checkPath(%q) = %v, want %v", p, got, ok)
		}
	}
}

func TestRequestID(t *testing.T) {
	a, b := newRequestID(), newRequestID()
	if a == b || !validRequestID(a) {
		t.Errorf("ids %q %q", a, b)
	}
	for _, bad := range []string{"", "a b", "x\r\ny", string(make([]byte, 129))} {
		if validRequestID(bad) {
			t.Errorf("validRequestID(%q) = true", bad)
		}
	}
}

func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"/v1/orders/42", "/v1/%2e%2e/x", "/a//b", "/a%2Fb", "/%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if !checkPath(p) {
			return
		}
		// An accepted path never decodes to anything a backend could read
		// as a traversal or as a different segmentation.
		segs := strings.Split(p[1:], "/")
		for i, s := range segs {
			d, err := url.PathUnescape(s)
			if err != nil || d == "." || d == ".." || strings.ContainsAny(d, "/\\\x00") || (s == "" && i != len(segs)-1) {
				t.Fatalf("accepted %q (segment %q decodes to %q)", p, s, d)
			}
		}
	})
}
