package edge

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// Why a request path is refused (400 BAD_REQUEST). Sentinels, so that
// refusing costs no allocation.
var (
	errPathNotAbsolute = errors.New("does not start with /")
	errPathEscape      = errors.New("has a malformed percent escape")
	errPathEmptySeg    = errors.New("has an empty segment (//)")
	errPathDotSeg      = errors.New("has a dot segment (also percent-encoded)")
	errPathSlash       = errors.New(`has an encoded "/" or a "\" (either form)`)
	errPathControl     = errors.New("has a control character (either form)")
	errPathSemicolon   = errors.New(`has a ";" (either form), which some backends read as path parameters`)
	errPathDouble      = errors.New("has a double-encoded escape (%25 followed by two hex digits)")
	errPathUTF8        = errors.New("decodes to invalid or overlong UTF-8")
)

// Byte classes of the canonical form, for a byte of the decoded path.
const (
	// pathEncode: written as %XX with upper-case hex. The default: ASCII
	// that is not a pchar (space, '"', '#', '<', '>', '?', '[', ']', '^',
	// '`', '{', '|', '}'), '%' itself, and every byte of a UTF-8 sequence.
	pathEncode = iota
	// pathLiteral: written as itself. RFC 3986 unreserved characters
	// (ALPHA DIGIT - . _ ~, §6.2.2.2: an escape of one is the same
	// character) and the pchar sub-delims and ':' '@', which backends
	// decode to the same byte (route literals are written with them raw).
	pathLiteral
	// pathRefuse: the path is refused, raw or encoded.
	pathRefuse
)

var pathClass = func() (t [256]uint8) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = pathLiteral, pathLiteral
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = pathLiteral
	}
	for _, c := range "-._~!$&'()*+,=:@" {
		t[c] = pathLiteral
	}
	for c := 0; c < 0x20; c++ {
		t[c] = pathRefuse
	}
	for _, c := range "\x7f/\\;" {
		t[c] = pathRefuse
	}
	return t
}()

// canonicalPath returns the one form of an escaped request path that the
// edge routes on, authenticates, hands to the route's parameters and
// forwards to the backend, or why the path is refused.
//
// The canonical form is a function of the decoded path alone: every byte
// of url.PathUnescape(p) written as itself if it is a pathLiteral byte and
// as %XX (upper-case hex) otherwise, with "/" only ever a separator. Two
// paths a backend decodes to the same string therefore canonicalise to the
// same string (or are refused), so `/pub/%61dmin` is routed, checked and
// forwarded as `/pub/admin`, and `/caf%c3%a9` as `/caf%C3%A9`.
//
// Refused, in either form, because backends disagree on what they mean:
// an encoded "/" (a different segmentation), "\" (a separator on Windows),
// ";" (path parameters to servlet containers: `/pub/..;/admin`), control
// bytes, dot segments, empty segments (a trailing slash is kept: a distinct
// path, as in route patterns), a '%' followed by two hex digits once
// decoded (a double decoder would read another path), and bytes that are
// not valid UTF-8 (overlong forms such as %C0%AE decode to '.' in some).
//
// A path already canonical, the common case, is returned as it is,
// without allocating.
func canonicalPath(p string) (string, error) {
	if p == "" || p[0] != '/' {
		return "", errPathNotAbsolute
	}
	clean := true
	segLen, segDots := 0, 0 // decoded bytes of the current segment, and its dots
	pct := 0                // decoded '%' then hex digits seen in a row
	var u [utf8.UTFMax]byte // the UTF-8 sequence being read
	uHave, uNeed := 0, 0
	for i := 1; i <= len(p); {
		if i == len(p) || p[i] == '/' {
			if uHave > 0 {
				return "", errPathUTF8
			}
			if segLen == 0 && i < len(p) {
				return "", errPathEmptySeg
			}
			if segLen == segDots && segLen > 0 && segLen <= 2 {
				return "", errPathDotSeg
			}
			segLen, segDots, pct = 0, 0, 0
			i++
			continue
		}
		c, n, escaped := p[i], 1, false
		if pathClass[c] == pathLiteral && uHave == 0 && pct == 0 {
			// The common case: a raw letter, digit or the like.
			segLen++
			if c == '.' {
				segDots++
			}
			i++
			continue
		}
		if c == '%' {
			if i+2 >= len(p) {
				return "", errPathEscape
			}
			hi, ok1 := unhex(p[i+1])
			lo, ok2 := unhex(p[i+2])
			if !ok1 || !ok2 {
				return "", errPathEscape
			}
			c, n, escaped = hi<<4|lo, 3, true
			if isLowerHex(p[i+1]) || isLowerHex(p[i+2]) {
				clean = false
			}
		}
		switch pathClass[c] {
		case pathLiteral:
			clean = clean && !escaped
		case pathEncode:
			clean = clean && escaped
		default:
			switch {
			case c == '/' || c == '\\':
				return "", errPathSlash
			case c == ';':
				return "", errPathSemicolon
			default:
				return "", errPathControl
			}
		}
		switch {
		case uHave > 0:
			if c < 0x80 {
				return "", errPathUTF8
			}
			u[uHave] = c
			if uHave++; uHave == uNeed {
				if _, size := utf8.DecodeRune(u[:uNeed]); size != uNeed {
					return "", errPathUTF8 // overlong, surrogate, or out of range
				}
				uHave = 0
			}
		case c >= 0x80:
			switch {
			case c >= 0xc2 && c <= 0xdf:
				uNeed = 2
			case c >= 0xe0 && c <= 0xef:
				uNeed = 3
			case c >= 0xf0 && c <= 0xf4:
				uNeed = 4
			default:
				return "", errPathUTF8
			}
			u[0], uHave = c, 1
		}
		switch {
		case c == '%':
			pct = 1
		case pct > 0 && isHex(c):
			if pct++; pct == 3 {
				return "", errPathDouble
			}
		default:
			pct = 0
		}
		segLen++
		if c == '.' {
			segDots++
		}
		i += n
	}
	if clean {
		return p, nil
	}
	var b strings.Builder
	b.Grow(len(p) + len(p)/2)
	for i := 0; i < len(p); {
		c, n := p[i], 1
		if c == '%' {
			hi, _ := unhex(p[i+1])
			lo, _ := unhex(p[i+2])
			c, n = hi<<4|lo, 3
		} else if c == '/' {
			b.WriteByte('/')
			i++
			continue
		}
		if pathClass[c] == pathLiteral {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
		}
		i += n
	}
	return b.String(), nil
}

const upperHex = "0123456789ABCDEF"

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func isHex(c byte) bool { _, ok := unhex(c); return ok }

func isLowerHex(c byte) bool { return c >= 'a' && c <= 'f' }
