package edge

import (
	"net/url"
	"strings"
)

// checkPath reports whether an escaped request path is in the one canonical
// form the edge routes on. The same escaped path is matched against routes
// and its parameters are forwarded as they are, so it may not hold anything
// a backend could read differently: dot segments (also percent-encoded),
// backslashes, NUL or control bytes, or empty segments.
func checkPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return false
		}
	}
	rest := p[1:]
	for rest != "" {
		seg := rest
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			seg, rest = rest[:i], rest[i+1:]
			if seg == "" {
				return false // "//"
			}
		} else {
			rest = ""
		}
		if strings.IndexByte(seg, '%') >= 0 {
			d, err := url.PathUnescape(seg)
			if err != nil {
				return false
			}
			seg = d
			if strings.ContainsAny(seg, "/\\") || strings.IndexFunc(seg, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
				return false
			}
		}
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}
