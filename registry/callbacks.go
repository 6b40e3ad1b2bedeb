package registry

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// Callbacks say where an async job's end is told (docs/async.md): to the
// URL its caller gave in X-Callback-Url, when the API allows that URL,
// and to the API's own destinations. Each callback is a POST of the job's
// final status (or a NATS message of it), retried with its own backoff;
// a callback to the caller's URL is signed with a key derived from the
// calling app's signing secret (package sign).
type Callbacks struct {
	// Allow lists the URL prefixes a caller's X-Callback-Url may start
	// with ("https://hooks.example.com/jobs/"; a host "*.example.com"
	// allows every name under example.com). None: callers may not name
	// one.
	Allow []string `json:"allow,omitempty"`
	// AllowPrivate lets a callback reach loopback, private, link-local and
	// other non-public addresses; refused by default, whatever the name
	// resolves to, so that a callback cannot be pointed inside the
	// network (server-side request forgery).
	AllowPrivate bool `json:"allow_private,omitempty"`
	// OnSuccess and OnFailure are the API's own destinations: told of
	// every job that succeeded, or failed or died.
	OnSuccess *Destination `json:"on_success,omitempty"`
	OnFailure *Destination `json:"on_failure,omitempty"`
	// Attempts, Backoff, MaxBackoff and Timeout are each callback's retry
	// policy: 1 to 20 attempts (default 5), a backoff doubling from
	// Backoff (default 1s) to MaxBackoff (default 1m), and each attempt's
	// timeout (default 5s, at most 1m).
	Attempts   int      `json:"attempts,omitempty"`
	Backoff    Duration `json:"backoff,omitempty"`
	MaxBackoff Duration `json:"max_backoff,omitempty"`
	Timeout    Duration `json:"timeout,omitempty"`
}

// Destination is where an API's jobs' ends are told: a URL (an HTTP POST)
// or a NATS subject under bus.ServicePrefix (a publish; a stream that
// captures the subject keeps it).
type Destination struct {
	URL     string `json:"url,omitempty"`
	Subject string `json:"subject,omitempty"`
}

// Callback defaults and bounds.
const (
	DefaultCallbackAttempts = 5
	DefaultCallbackTimeout  = 5 * time.Second
	MaxCallbackTimeout      = time.Minute
)

func (cb *Callbacks) check(prefix string, add func(path, format string, args ...any)) {
	if cb == nil {
		return
	}
	for i, a := range cb.Allow {
		if _, err := parseCallbackURL(a, true); err != nil {
			add(fmt.Sprintf("%s.allow[%d]", prefix, i), "%v", err)
		}
	}
	for name, d := range map[string]*Destination{"on_success": cb.OnSuccess, "on_failure": cb.OnFailure} {
		if d == nil {
			continue
		}
		switch {
		case (d.URL == "") == (d.Subject == ""):
			add(prefix+"."+name, "give url or subject, one of them")
		case d.URL != "":
			if _, err := parseCallbackURL(d.URL, false); err != nil {
				add(prefix+"."+name+".url", "%v", err)
			}
		default:
			if err := checkServiceSubject(d.Subject); err != nil {
				add(prefix+"."+name+".subject", "%v", err)
			}
		}
	}
	if cb.Attempts < 0 || cb.Attempts > MaxAsyncAttempts {
		add(prefix+".attempts", "must be between 1 and %d", MaxAsyncAttempts)
	}
	if cb.Backoff < 0 || time.Duration(cb.Backoff) > time.Hour {
		add(prefix+".backoff", "must be between 1ms and 1h")
	}
	if cb.MaxBackoff < 0 || time.Duration(cb.MaxBackoff) > 24*time.Hour || (cb.MaxBackoff > 0 && cb.MaxBackoff < cb.Backoff) {
		add(prefix+".max_backoff", "must be between backoff and 24h")
	}
	if cb.Timeout < 0 || time.Duration(cb.Timeout) > MaxCallbackTimeout {
		add(prefix+".timeout", "must be between 1ms and %v", MaxCallbackTimeout)
	}
}

// DefaultCallbacks is a callbacks block of defaults only.
func DefaultCallbacks() *Callbacks {
	cb := &Callbacks{}
	cb.applyDefaults()
	return cb
}

func (cb *Callbacks) applyDefaults() {
	if cb.Attempts == 0 {
		cb.Attempts = DefaultCallbackAttempts
	}
	if cb.Backoff == 0 {
		cb.Backoff = Duration(time.Second)
	}
	if cb.MaxBackoff == 0 {
		cb.MaxBackoff = Duration(max(time.Minute, time.Duration(cb.Backoff)))
	}
	if cb.Timeout == 0 {
		cb.Timeout = Duration(DefaultCallbackTimeout)
	}
}

// parseCallbackURL checks a callback URL, or an allowlist entry (prefix:
// its host may start with "*." and its path is a prefix): http or https,
// a host, no user, no fragment; an entry has no query either.
func parseCallbackURL(s string, prefix bool) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, fmt.Errorf("is not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("must be an http or https URL (got %q)", s)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("must name a host (got %q)", s)
	case u.User != nil:
		return nil, fmt.Errorf("must not carry a user or password")
	case u.Fragment != "" || strings.Contains(s, "#"):
		return nil, fmt.Errorf("must not have a fragment")
	case prefix && u.RawQuery != "":
		return nil, fmt.Errorf("an allowed prefix has no query")
	case !prefix && strings.Contains(u.Hostname(), "*"):
		return nil, fmt.Errorf("must name one host")
	}
	if h := u.Hostname(); strings.Contains(h, "*") && (!strings.HasPrefix(h, "*.") || strings.Count(h, "*") != 1 || len(h) < 4) {
		return nil, fmt.Errorf("a host wildcard is a leading \"*.\" only (got %q)", h)
	}
	return u, nil
}

// defaultPort is a URL's port, or its scheme's.
func defaultPort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

// CallbackURL checks a caller's X-Callback-Url against the allowlist and
// returns it parsed; the error says why it is refused.
func (cb *Callbacks) CallbackURL(s string) (*url.URL, error) {
	if cb == nil || len(cb.Allow) == 0 {
		return nil, fmt.Errorf("this API takes no callback URL")
	}
	if len(s) > 2048 {
		return nil, fmt.Errorf("the callback URL is longer than 2048 bytes")
	}
	u, err := parseCallbackURL(s, false)
	if err != nil {
		return nil, fmt.Errorf("the callback URL %v", err)
	}
	if !cb.AllowPrivate {
		if ip := net.ParseIP(u.Hostname()); ip != nil && !PublicIP(ip) {
			return nil, fmt.Errorf("the callback URL names an address that is not public")
		}
	}
	if err := checkCallbackPath(u); err != nil {
		return nil, err
	}
	host := strings.ToLower(u.Hostname())
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	for _, a := range cb.Allow {
		p, err := parseCallbackURL(a, true)
		if err != nil || p.Scheme != u.Scheme || defaultPort(p) != defaultPort(u) {
			continue
		}
		ph := strings.ToLower(p.Hostname())
		if suffix, wild := strings.CutPrefix(ph, "*"); wild {
			if !strings.HasSuffix(host, suffix) || len(host) == len(suffix) {
				continue
			}
		} else if ph != host {
			continue
		}
		pp := p.EscapedPath()
		if pp == "" {
			pp = "/"
		}
		if strings.HasPrefix(path, pp) && (strings.HasSuffix(pp, "/") || len(path) == len(pp) || path[len(pp)] == '/') {
			return u, nil
		}
	}
	return nil, fmt.Errorf("the callback URL is not one this API allows")
}

// checkCallbackPath refuses a path the receiver may resolve outside an
// allowed prefix: Go's client sends the path as written and the receiver
// normalises it, so "/jobs/../admin", "/jobs/%2e%2e/admin" or
// "/jobs/..%2fadmin" would escape "/jobs/". Refused: a "." or ".."
// segment (as written or decoded), and a percent-encoded dot, slash or
// backslash, or a backslash, anywhere in the path.
func checkCallbackPath(u *url.URL) error {
	raw := u.EscapedPath()
	lower := strings.ToLower(raw)
	for _, enc := range []string{"%2e", "%2f", "%5c"} {
		if strings.Contains(lower, enc) {
			return fmt.Errorf("the callback URL's path must not percent-encode a dot, slash or backslash")
		}
	}
	if strings.Contains(u.Path, `\`) || strings.Contains(raw, `\`) {
		return fmt.Errorf("the callback URL's path must not hold a backslash")
	}
	for _, p := range []string{raw, u.Path} {
		for _, seg := range strings.Split(p, "/") {
			if seg == "." || seg == ".." {
				return fmt.Errorf("the callback URL's path must not have a \".\" or \"..\" segment")
			}
		}
	}
	return nil
}

// nonPublic are the prefixes PublicIP refuses.
var nonPublic = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",       // "this" network
		"10.0.0.0/8",      // private (RFC 1918)
		"100.64.0.0/10",   // CGNAT
		"127.0.0.0/8",     // loopback
		"169.254.0.0/16",  // link-local
		"172.16.0.0/12",   // private (RFC 1918)
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // documentation (TEST-NET-1)
		"192.168.0.0/16",  // private (RFC 1918)
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // documentation (TEST-NET-2)
		"203.0.113.0/24",  // documentation (TEST-NET-3)
		"224.0.0.0/4",     // multicast
		"240.0.0.0/4",     // reserved, and broadcast
		"::/96",           // unspecified, loopback, IPv4-compatible
		"::ffff:0:0/96",   // IPv4-mapped (unmapped first; kept for safety)
		"64:ff9b::/96",    // NAT64, embedding any IPv4 address
		"64:ff9b:1::/48",  // local-use NAT64
		"100::/64",        // discard-only
		"2001::/32",       // Teredo, embedding any IPv4 address
		"2001:db8::/32",   // documentation
		"2002::/16",       // 6to4, embedding any IPv4 address
		"fc00::/7",        // unique local
		"fe80::/10",       // link-local
		"fec0::/10",       // site-local (deprecated)
		"ff00::/8",        // multicast
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

// PublicIP reports whether ip is a public unicast address: not in any of
// the loopback, private, link-local, unspecified, multicast, CGNAT,
// benchmarking, documentation or reserved ranges, nor an IPv6 address
// that embeds or translates to an IPv4 one (IPv4-mapped, IPv4-compatible,
// NAT64, 6to4, Teredo), nor site-local. An invalid ip is not public.
func PublicIP(ip net.IP) bool {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return false
	}
	a = a.Unmap()
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return !(a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified())
}
