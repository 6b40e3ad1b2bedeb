package push

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/jetway-gw/jetway/resilience"
)

// hostBits is the prefix one host's addresses share: an IPv4 address, or
// an IPv6 /64.
func hostBits(ip netip.Addr) int {
	if ip.Is4() {
		return 32
	}
	return 64
}

// Refusal is why a connection is not admitted now, and when to come back.
type Refusal struct {
	// Overloaded: the edge's connect rate (a reconnect storm is paced);
	// otherwise the app's or the address's connection cap.
	Overloaded bool
	Message    string
	RetryAfter time.Duration
}

func (r *Refusal) Error() string { return r.Message }

// admission holds an edge's connection counts by app and by client
// address, and its connect rate.
type admission struct {
	perApp, perIP int
	// Cluster-wide caps (0: none), with the peers' counts (census.go).
	clusterApp, clusterIP int
	census                *census
	rate                  resilience.Limiter // nil: no rate
	appRate               int                // connects one app may make a second: half the rate
	byApp                 map[string]int
	byIP                  map[netip.Prefix]int
	// The connects of each app in the current second, for appRate.
	second   int64
	connects map[string]int
}

func newAdmission(o Options) (*admission, error) {
	a := &admission{perApp: o.MaxConnsPerApp, perIP: o.MaxConnsPerIP, byApp: map[string]int{}, byIP: map[netip.Prefix]int{}, connects: map[string]int{},
		clusterApp: o.ClusterMaxConnsPerApp, clusterIP: o.ClusterMaxConnsPerIP, census: newCensus(o.CensusInterval)}
	if o.ConnectRate > 0 {
		a.appRate = max(o.ConnectRate/2, 1)
		l, err := resilience.NewLimiter(resilience.RuleConfig{Limit: o.ConnectRate, Window: time.Second})
		if err != nil {
			return nil, fmt.Errorf("push: connect rate: %w", err)
		}
		a.rate = l
	}
	return a, nil
}

// Admit counts a new connection of app from ip, or says why not; release
// uncounts it (call it once the connection ends, or if it never opens).
// The per-edge caps count this edge's connections; the cluster-wide ones
// add what the other edges said in their last census (census.go). An
// IPv6 client counts by its /64 (one host's addresses), and an address is the client's as the edge sees
// it (behind a proxy: --trusted-proxies). One app may take at most half
// the edge's connect rate a second, so that one tenant reconnecting in a
// loop cannot lock out the others.
func (s *Server) Admit(app string, ip netip.Addr) (release func(), refusal *Refusal) {
	a := s.admit
	var host netip.Prefix
	if ip.IsValid() {
		ip = ip.Unmap()
		host, _ = ip.Prefix(hostBits(ip))
	}
	s.admitMu.Lock()
	defer s.admitMu.Unlock()
	var peerApp, peerIP int // what the other edges said (census.go)
	if a.clusterApp > 0 || a.clusterIP > 0 {
		peerApp, peerIP = a.census.counts(app, host)
	}
	switch {
	case a.perApp > 0 && a.byApp[app] >= a.perApp:
		s.stats.refused.Add(1)
		return nil, &Refusal{Message: fmt.Sprintf("app %s has %d connections on this edge, its cap", app, a.byApp[app]), RetryAfter: 10 * time.Second}
	case a.perIP > 0 && host.IsValid() && a.byIP[host] >= a.perIP:
		s.stats.refused.Add(1)
		return nil, &Refusal{Message: fmt.Sprintf("%d connections from this address on this edge, its cap", a.byIP[host]), RetryAfter: 10 * time.Second}
	case a.clusterApp > 0 && a.byApp[app]+peerApp >= a.clusterApp:
		s.stats.refused.Add(1)
		return nil, &Refusal{Message: fmt.Sprintf("app %s has %d connections across the cluster, its cap", app, a.byApp[app]+peerApp), RetryAfter: 10 * time.Second}
	case a.clusterIP > 0 && host.IsValid() && a.byIP[host]+peerIP >= a.clusterIP:
		s.stats.refused.Add(1)
		return nil, &Refusal{Message: fmt.Sprintf("%d connections from this address across the cluster, its cap", a.byIP[host]+peerIP), RetryAfter: 10 * time.Second}
	}
	if a.rate != nil {
		now := time.Now()
		if sec := now.Unix(); sec != a.second {
			a.second, a.connects = sec, map[string]int{}
		}
		if a.connects[app] >= a.appRate {
			s.stats.refused.Add(1)
			return nil, &Refusal{Overloaded: true, Message: fmt.Sprintf("app %s has made %d connects this second, its share of this edge's connect rate; come back later", app, a.connects[app]), RetryAfter: time.Second}
		}
		if d := a.rate.Take(now, 0); !d.Allowed {
			s.stats.refused.Add(1)
			return nil, &Refusal{Overloaded: true, Message: "this edge takes new push connections at its connect rate; come back later", RetryAfter: max(d.RetryAfter, time.Second)}
		}
		a.connects[app]++
	}
	a.byApp[app]++
	if host.IsValid() {
		a.byIP[host]++
	}
	released := false
	return func() {
		s.admitMu.Lock()
		defer s.admitMu.Unlock()
		if released {
			return
		}
		released = true
		if a.byApp[app]--; a.byApp[app] <= 0 {
			delete(a.byApp, app)
		}
		if host.IsValid() {
			if a.byIP[host]--; a.byIP[host] <= 0 {
				delete(a.byIP, host)
			}
		}
	}, nil
}
