package push

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/jetway-gw/jetway/resilience"
)

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
	rate          resilience.Limiter // nil: no rate
	byApp         map[string]int
	byIP          map[netip.Addr]int
}

func newAdmission(o Options) (*admission, error) {
	a := &admission{perApp: o.MaxConnsPerApp, perIP: o.MaxConnsPerIP, byApp: map[string]int{}, byIP: map[netip.Addr]int{}}
	if o.ConnectRate > 0 {
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
// Connections are counted on this edge: a client spread over edges by a
// load balancer gets each edge's cap.
func (s *Server) Admit(app string, ip netip.Addr) (release func(), refusal *Refusal) {
	a := s.admit
	s.admitMu.Lock()
	defer s.admitMu.Unlock()
	switch {
	case a.perApp > 0 && a.byApp[app] >= a.perApp:
		s.stats.refused.Add(1)
		return nil, &Refusal{Message: fmt.Sprintf("app %s has %d connections on this edge, its cap", app, a.byApp[app]), RetryAfter: 10 * time.Second}
	case a.perIP > 0 && ip.IsValid() && a.byIP[ip] >= a.perIP:
		s.stats.refused.Add(1)
		return nil, &Refusal{Message: fmt.Sprintf("%d connections from this address on this edge, its cap", a.byIP[ip]), RetryAfter: 10 * time.Second}
	}
	if a.rate != nil {
		if d := a.rate.Take(time.Now(), 0); !d.Allowed {
			s.stats.refused.Add(1)
			return nil, &Refusal{Overloaded: true, Message: "this edge takes new push connections at its connect rate; come back later", RetryAfter: max(d.RetryAfter, time.Second)}
		}
	}
	a.byApp[app]++
	if ip.IsValid() {
		a.byIP[ip]++
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
		if ip.IsValid() {
			if a.byIP[ip]--; a.byIP[ip] <= 0 {
				delete(a.byIP, ip)
			}
		}
	}, nil
}
