package edge

import (
	"net/http"
	"net/netip"
	"strings"
)

// IPRules are allow and deny lists of addresses and CIDR prefixes. A
// client is refused when it matches a deny entry, or when there is an allow
// list and it matches none of it.
type IPRules struct {
	Allow []netip.Prefix
	Deny  []netip.Prefix
}

func contains(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Allows reports whether the rules let a client address in.
func (r *IPRules) Allows(a netip.Addr) bool {
	if r == nil {
		return true
	}
	if contains(r.Deny, a) {
		return false
	}
	return len(r.Allow) == 0 || contains(r.Allow, a)
}

// empty reports whether the rules say nothing.
func (r *IPRules) empty() bool { return r == nil || len(r.Allow)+len(r.Deny) == 0 }

// clientAddr is the address a request comes from: the socket peer, unless
// the peer is a trusted proxy, in which case it is the right-most entry of
// X-Forwarded-For that is not a trusted proxy. Forwarding headers from
// untrusted peers are ignored, so they cannot spoof an address for IP
// rules, rate limits or logs. chain is the X-Forwarded-For to send on.
func clientAddr(r *http.Request, trusted []netip.Prefix) (addr netip.Addr, chain string) {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, peerIP(r.RemoteAddr)
	}
	addr = peer.Addr().Unmap()
	if len(trusted) == 0 || !contains(trusted, addr) {
		return addr, addr.String()
	}
	xff := strings.Join(r.Header.Values("X-Forwarded-For"), ",")
	if xff == "" {
		return addr, addr.String()
	}
	chain = xff + ", " + addr.String()
	hops := strings.Split(xff, ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // garbage: trust nothing further left
		}
		addr = a.Unmap()
		if !contains(trusted, addr) {
			break
		}
	}
	return addr, chain
}

// callerForwarding are request headers that tell some backends who the
// client is or which request was made: the URL (IIS and Symfony take
// X-Original-Url as the path) or the method (Rack, hence Rails, and Symfony
// take X-HTTP-Method-Override on a POST as the method, so a POST route would
// reach the backend's DELETE). Only the edge says that: it drops these,
// whoever sent them, and sets X-Forwarded-For (see clientAddr),
// X-Forwarded-Host, X-Forwarded-Proto and X-Real-Ip itself.
var callerForwarding = []string{
	"Forwarded", "X-Real-Ip", "X-Client-Ip", "True-Client-Ip", "X-Cluster-Client-Ip",
	"X-Original-Url", "X-Rewrite-Url",
	"X-Http-Method-Override", "X-Http-Method", "X-Method-Override",
}

// dropCallerForwarding removes, in place, the request headers a backend
// must not get from a caller: every X-Forwarded-* and callerForwarding
// header, and every header whose name has a '_'. CGI, WSGI and Rack
// backends read '_' and '-' alike, so X_Forwarded_For would pass for the
// edge's X-Forwarded-For and X_Jetway_App for the worker's X-Jetway-App;
// like nginx's default (underscores_in_headers off), such names are
// dropped rather than mapped. h holds canonical names, as net/http makes.
func dropCallerForwarding(h map[string][]string) {
	for k := range h {
		if strings.IndexByte(k, '_') >= 0 || strings.HasPrefix(k, "X-Forwarded-") {
			delete(h, k)
		}
	}
	for _, k := range callerForwarding {
		delete(h, k)
	}
}
