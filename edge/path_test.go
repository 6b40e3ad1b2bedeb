package edge

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCanonicalPath(t *testing.T) {
	for p, want := range map[string]string{
		// Already canonical: returned as they are.
		"/":                       "/",
		"/v1/orders/42":           "/v1/orders/42",
		"/v1/orders/a%20b":        "/v1/orders/a%20b",
		"/v1/x/":                  "/v1/x/",
		"/v1/caf%C3%A9":           "/v1/caf%C3%A9",
		"/v1/a:b@c!$&'()*+,=-._~": "/v1/a:b@c!$&'()*+,=-._~",
		"/v1/100%25":              "/v1/100%25",
		"/v1/%3F%23%5B%5D":        "/v1/%3F%23%5B%5D",
		// Escaped unreserved characters are the characters (RFC 3986 §6.2.2.2).
		"/pub/%61dmin/x":   "/pub/admin/x",
		"/pub/%41dmin/x":   "/pub/Admin/x",
		"/p%75b/admin/x":   "/pub/admin/x",
		"/%70%75%62/x":     "/pub/x",
		"/v1/%7E%2D%2E%5F": "/v1/~-._",
		"/v1/%31%32":       "/v1/12",
		// So are escaped sub-delims, ':' and '@' (backends decode them alike).
		"/v1/a%3Ab%40c%21%24%26%27%28%29%2A%2B%2C%3D": "/v1/a:b@c!$&'()*+,=",
		// The other escapes keep their escape, in upper case.
		"/v1/caf%c3%a9": "/v1/caf%C3%A9",
		"/v1/a%2fb%3f":  "", // encoded slash: refused whatever the case
		"/v1/%3f%5b":    "/v1/%3F%5B",
		"/v1/100%2a%25": "/v1/100*%25",
		// Bytes that are not pchars are escaped.
		"/v1/caf\xc3\xa9":     "/v1/caf%C3%A9",
		"/v1/{x}|^`[]#?\"<> ": "/v1/%7Bx%7D%7C%5E%60%5B%5D%23%3F%22%3C%3E%20",
		// Refused, raw or encoded.
		"":                        "",
		"v1":                      "",
		"*":                       "",
		"/v1//x":                  "",
		"//":                      "",
		"/v1/../admin":            "",
		"/v1/./x":                 "",
		"/v1/..":                  "",
		"/v1/.":                   "",
		"/v1/%2e%2e/admin":        "",
		"/v1/%2E./admin":          "",
		"/v1/%2e":                 "",
		"/v1/a%2Fb":               "",
		"/v1/a%5Cb":               "",
		"/v1/a\\b":                "",
		"/v1/a%00b":               "",
		"/v1/a%0d%0aX:%20y":       "",
		"/v1/a\x7fb":              "",
		"/v1/a%7Fb":               "",
		"/v1/a%09b":               "",
		"/v1/%zz":                 "",
		"/v1/%":                   "",
		"/v1/%4":                  "",
		"/v1/%4/x":                "",
		"/pub/..;/admin":          "",
		"/pub;x/admin":            "",
		"/pub/admin;jsessionid=1": "",
		"/pub/%3Badmin":           "",
		"/pub/%2561dmin":          "", // double-encoded: a double decoder reads /pub/admin
		"/pub/%25%36%31dmin":      "",
		"/pub/%%61":               "",
		"/pub/%252e%252e/x":       "",
		"/v1/%C0%AE%C0%AE/x":      "", // overlong '.'
		"/v1/%C0%AF":              "", // overlong '/'
		"/v1/%E0%80%AE":           "",
		"/v1/%ED%A0%80":           "", // a surrogate
		"/v1/%F4%90%80%80":        "", // above U+10FFFF
		"/v1/%C3":                 "", // truncated
		"/v1/%C3/%A9":             "", // split by a separator
		"/v1/%C3x":                "",
		"/v1/%A9":                 "", // a lone continuation byte
		"/v1/\xff":                "",
	} {
		got, err := canonicalPath(p)
		if want == "" {
			if err == nil {
				t.Errorf("canonicalPath(%q) = %q, want refused", p, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("canonicalPath(%q) = %q, %v; want %q", p, got, err, want)
		}
	}
}

// The common case costs nothing: a canonical path is returned as it is.
func TestCanonicalPathNoAlloc(t *testing.T) {
	for _, p := range []string{"/v1/orders/42", "/v1/caf%C3%A9/a%20b", "/"} {
		if n := testing.AllocsPerRun(100, func() { _, _ = canonicalPath(p) }); n != 0 {
			t.Errorf("canonicalPath(%q): %v allocations, want 0", p, n)
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

// FuzzCheckPath checks canonicalPath as a property: an accepted path's
// canonical form is canonical itself, decodes to what the path decodes to
// (what a backend reads), never to a traversal or another segmentation,
// and every other spelling of that decoded path canonicalises to the same
// string or is refused.
func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"/v1/orders/42", "/v1/%2e%2e/x", "/a//b", "/a%2Fb", "/%", "/pub/%61dmin/x", "/caf%c3%a9", "/a;b", "/%2561"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c, err := canonicalPath(p)
		if err != nil {
			return
		}
		if c2, err := canonicalPath(c); err != nil || c2 != c {
			t.Fatalf("canonical(%q) = %q, but canonical(%q) = %q, %v", p, c, c, c2, err)
		}
		dp, err1 := url.PathUnescape(p)
		dc, err2 := url.PathUnescape(c)
		if err1 != nil || err2 != nil || dp != dc {
			t.Fatalf("%q decodes to %q (%v), its canonical %q to %q (%v)", p, dp, err1, c, dc, err2)
		}
		if !utf8.ValidString(dc) || strings.ContainsAny(dc, ";\\\x00\x7f") {
			t.Fatalf("accepted %q decodes to %q", p, dc)
		}
		if _, err := url.PathUnescape(dc); err == nil && strings.Contains(dc, "%") {
			t.Fatalf("accepted %q decodes to %q, a path again", p, dc)
		}
		segs := strings.Split(c[1:], "/")
		for i, s := range segs {
			d, err := url.PathUnescape(s)
			if err != nil || d == "." || d == ".." || strings.ContainsAny(d, "/\\\x00") || (s == "" && i != len(segs)-1) {
				t.Fatalf("accepted %q as %q (segment %q decodes to %q)", p, c, s, d)
			}
		}
		// Other spellings of the same decoded path: every byte escaped
		// (in mixed case), and every byte raw where that is unambiguous.
		var enc, raw strings.Builder
		for i, s := range segs {
			if i > 0 {
				enc.WriteByte('/')
				raw.WriteByte('/')
			}
			d, _ := url.PathUnescape(s)
			for j := 0; j < len(d); j++ {
				if j%2 == 0 {
					fmt.Fprintf(&enc, "%%%02X", d[j])
				} else {
					fmt.Fprintf(&enc, "%%%02x", d[j])
				}
			}
			raw.WriteString(d)
		}
		for _, q := range []string{"/" + enc.String(), "/" + raw.String()} {
			dq, err := url.PathUnescape(q)
			if err != nil || dq != dc {
				continue // not a spelling of the same path (a raw '%')
			}
			if cq, err := canonicalPath(q); err == nil && cq != c {
				t.Fatalf("%q and %q decode alike but canonicalise to %q and %q", p, q, c, cq)
			}
		}
	})
}

func BenchmarkCanonicalPath(b *testing.B) {
	for _, p := range []string{"/v1/orders/42", "/v1/caf%C3%A9/items/a%20b", "/pub/%61dmin/x"} {
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				_, _ = canonicalPath(p)
			}
		})
	}
}
