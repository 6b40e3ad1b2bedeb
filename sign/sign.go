package sign

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Scheme is the Authorization scheme of signed requests.
const Scheme = "JW1-HMAC-SHA256"

// StringToSign builds S for a request.
func StringToSign(method, escapedPath, rawQuery, ts, nonce string, body []byte, headerNames []string, h http.Header) string {
	sum := sha256.Sum256(body)
	var b strings.Builder
	b.WriteString(Scheme)
	b.WriteByte('\n')
	b.WriteString(strings.ToUpper(method))
	b.WriteByte('\n')
	b.WriteString(escapedPath)
	b.WriteByte('\n')
	b.WriteString(canonicalQuery(rawQuery))
	b.WriteByte('\n')
	b.WriteString(ts)
	b.WriteByte('\n')
	b.WriteString(nonce)
	b.WriteByte('\n')
	b.WriteString(hex.EncodeToString(sum[:]))
	for _, n := range headerNames {
		b.WriteByte('\n')
		b.WriteString(n)
		b.WriteByte(':')
		b.WriteString(strings.TrimSpace(strings.Join(h.Values(n), ",")))
	}
	return b.String()
}

func canonicalQuery(raw string) string {
	v, _ := url.ParseQuery(raw)
	var pairs []string
	for k, vs := range v {
		for _, x := range vs {
			pairs = append(pairs, url.QueryEscape(k)+"="+url.QueryEscape(x))
		}
	}
	sort.Strings(pairs)
	return strings.Join(pairs, "&")
}

// MAC is base64url(HMAC-SHA256(secret, s)).
func MAC(secret []byte, s string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(s))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Sign adds the Authorization header to r for app with secret, signing the
// body and the named headers. body must be what r will send.
func Sign(r *http.Request, body []byte, app string, secret []byte, headerNames ...string) error {
	var nb [18]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return err
	}
	nonce := base64.RawURLEncoding.EncodeToString(nb[:])
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	names := make([]string, len(headerNames))
	for i, n := range headerNames {
		names[i] = strings.ToLower(n)
	}
	s := StringToSign(r.Method, r.URL.EscapedPath(), r.URL.RawQuery, ts, nonce, body, names, r.Header)
	r.Header.Set("Authorization", fmt.Sprintf("%s app=%s,ts=%s,nonce=%s,headers=%s,sig=%s", Scheme, app, ts, nonce, strings.Join(names, ";"), MAC(secret, s)))
	return nil
}

// Params are the parts of a signed request's Authorization header.
type Params struct {
	App, TS, Nonce, Sig string
	Headers             []string
}

// Parse reads a JW1-HMAC-SHA256 Authorization header; every part is
// required but headers. The scheme name is case-insensitive and may be
// followed by several spaces (RFC 7235 §2.1); the string to sign always
// names the scheme as Scheme, whatever the header's spelling.
func Parse(auth string) (Params, error) {
	if len(auth) <= len(Scheme) || auth[len(Scheme)] != ' ' || !strings.EqualFold(auth[:len(Scheme)], Scheme) {
		return Params{}, fmt.Errorf("not a %s authorization", Scheme)
	}
	rest := strings.TrimLeft(auth[len(Scheme):], " ")
	var p Params
	seen := map[string]bool{}
	for _, part := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || seen[k] {
			return Params{}, fmt.Errorf("malformed or repeated part %q", part)
		}
		seen[k] = true
		switch k {
		case "app":
			p.App = v
		case "ts":
			p.TS = v
		case "nonce":
			p.Nonce = v
		case "sig":
			p.Sig = v
		case "headers":
			if v != "" {
				p.Headers = strings.Split(v, ";")
			}
		default:
			return Params{}, fmt.Errorf("unknown part %q", k)
		}
	}
	if p.App == "" || p.TS == "" || p.Sig == "" {
		return Params{}, fmt.Errorf("app, ts, nonce and sig are required")
	}
	if len(p.Nonce) < 16 || len(p.Nonce) > 64 || strings.IndexFunc(p.Nonce, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) >= 0 {
		return Params{}, fmt.Errorf("nonce must be 16 to 64 characters of A-Z a-z 0-9 - _")
	}
	for _, h := range p.Headers {
		if h == "" || h != strings.ToLower(h) || strings.ContainsAny(h, " :\t") {
			return Params{}, fmt.Errorf("signed header names must be lower-case names")
		}
	}
	return p, nil
}
