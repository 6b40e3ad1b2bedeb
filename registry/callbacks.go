package registry

import (
	"fmt"
	"net"
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

// PublicIP reports whether ip is a public unicast address: not loopback,
// private (RFC 1918, fc00::/7), link-local, unspecified, multicast, CGNAT
// (100.64.0.0/10), or an IPv4 address in IPv6 clothing of one of those.
func PublicIP(ip net.IP) bool {
	if v4 := ip.To4(); v4 != nil {
		ip = v4
		if v4[0] == 0 || v4[0] == 100 && v4[1]&0xc0 == 64 || v4[0] == 192 && v4[1] == 0 && v4[2] == 0 || v4[0] >= 240 {
			return false
		}
	}
	return !(ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified())
}
