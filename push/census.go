package push

import (
	"encoding/json"
	"net/netip"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/resilience"
)

// The connection census: how cluster-wide connection caps are kept without
// a counter server to fail or a round trip per connect. Every edge with a
// cluster cap publishes, once per CensusInterval, how many connections it
// holds per app and — for the addresses that hold many of its
// connections — per client address. Each edge keeps the last census of
// every peer heard within three intervals, and admits a connection when
// its own count plus its peers' stays under the cap.
//
// The caps are therefore as exact as a second is long: a burst spread over
// edges within one interval may pass a cap by what each edge admitted
// meanwhile (the per-edge caps and connect rate bound that). Addresses
// with fewer than max(1, cap/(4×edges)) connections on an edge are left
// out of its census (a census lists what can matter, not every client),
// which lets an address through with at most a quarter of the cap more.
// An edge that stops says so, and its connections stop counting at once;
// one killed stops counting after three intervals.
//
// Only edges may publish a census (bus.RolePermissions). A forged one is
// bounded like an honest one (entries, counts up to the cap, peers up to
// resilience.MaxClusterPeers): it can make the caps refuse for three
// intervals, never let more through.

// CensusInterval is how often an edge with a cluster-wide cap publishes
// its census.
const CensusInterval = time.Second

// maxCensusEntries bounds the apps and the addresses of one census, sent
// or received (the largest counts are sent first).
const maxCensusEntries = 20000

type censusMsg struct {
	Edge string         `json:"edge"`
	Gone bool           `json:"gone,omitempty"` // the edge stops: forget its counts
	Apps map[string]int `json:"apps,omitempty"`
	IPs  map[string]int `json:"ips,omitempty"` // by prefix: an IPv4 /32 or an IPv6 /64
}

type peerCensus struct {
	at   time.Time
	apps map[string]int
	ips  map[netip.Prefix]int
}

// census is an edge's view of its peers' connections, under admitMu.
type census struct {
	interval time.Duration
	peers    map[string]*peerCensus // by edge id
	apps     map[string]int         // the sums over peers
	ips      map[netip.Prefix]int
}

func newCensus(interval time.Duration) *census {
	if interval <= 0 {
		interval = CensusInterval
	}
	return &census{interval: interval, peers: map[string]*peerCensus{}, apps: map[string]int{}, ips: map[netip.Prefix]int{}}
}

// forget takes a peer's counts out of the sums. admitMu held.
func (c *census) forget(id string) {
	p := c.peers[id]
	if p == nil {
		return
	}
	for k, n := range p.apps {
		if c.apps[k] -= n; c.apps[k] <= 0 {
			delete(c.apps, k)
		}
	}
	for k, n := range p.ips {
		if c.ips[k] -= n; c.ips[k] <= 0 {
			delete(c.ips, k)
		}
	}
	delete(c.peers, id)
}

// expire forgets the peers not heard from within three intervals.
// admitMu held.
func (c *census) expire(now time.Time) {
	for id, p := range c.peers {
		if now.Sub(p.at) > 3*c.interval {
			c.forget(id)
		}
	}
}

// receive applies a peer's census.
func (s *Server) receiveCensus(m *nats.Msg) {
	var msg censusMsg
	if json.Unmarshal(m.Data, &msg) != nil || msg.Edge == "" || msg.Edge == s.o.NodeID {
		return
	}
	a := s.admit
	p := &peerCensus{at: time.Now(), apps: make(map[string]int, min(len(msg.Apps), maxCensusEntries)), ips: make(map[netip.Prefix]int, min(len(msg.IPs), maxCensusEntries))}
	for k, n := range msg.Apps {
		if len(p.apps) == maxCensusEntries {
			break
		}
		if n > 0 && bus.ValidName(k) == nil {
			p.apps[k] = min(n, a.clusterApp)
		}
	}
	for k, n := range msg.IPs {
		if len(p.ips) == maxCensusEntries {
			break
		}
		if pf, err := netip.ParsePrefix(k); err == nil && n > 0 && pf == pf.Masked() && pf.Bits() == hostBits(pf.Addr()) {
			p.ips[pf] = min(n, a.clusterIP)
		}
	}
	s.admitMu.Lock()
	defer s.admitMu.Unlock()
	c := a.census
	if _, known := c.peers[msg.Edge]; !known && !msg.Gone && len(c.peers) >= resilience.MaxClusterPeers {
		if c.expire(p.at); len(c.peers) >= resilience.MaxClusterPeers {
			return
		}
	}
	c.forget(msg.Edge)
	if msg.Gone {
		return
	}
	c.peers[msg.Edge] = p
	for k, n := range p.apps {
		c.apps[k] += n
	}
	for k, n := range p.ips {
		c.ips[k] += n
	}
}

// ownCensus is this edge's census now. admitMu held.
func (s *Server) ownCensus() censusMsg {
	a := s.admit
	msg := censusMsg{Edge: s.o.NodeID}
	if a.clusterApp > 0 && len(a.byApp) > 0 {
		msg.Apps = topCounts(a.byApp, 1, func(k string) string { return k })
	}
	if a.clusterIP > 0 && len(a.byIP) > 0 {
		least := max(1, a.clusterIP/(4*(len(a.census.peers)+1)))
		msg.IPs = topCounts(a.byIP, least, netip.Prefix.String)
	}
	return msg
}

// topCounts are the counts of at least least, at most maxCensusEntries of
// them (the largest), keyed by name.
func topCounts[K comparable](counts map[K]int, least int, name func(K) string) map[string]int {
	out := make(map[string]int, min(len(counts), maxCensusEntries))
	floor := least // once full: no count at or under it takes a place
	for k, n := range counts {
		if n < least || (len(out) == maxCensusEntries && n <= floor) {
			continue
		}
		if len(out) == maxCensusEntries {
			// Full: the smallest goes, if it is smaller. Rare (20,000
			// apps or busy addresses on one edge): a scan is fine.
			low, lowN := "", n
			for kk, nn := range out {
				if nn < lowN {
					low, lowN = kk, nn
				}
			}
			if low == "" {
				floor = n
				continue
			}
			delete(out, low)
			floor = lowN
		}
		out[name(k)] = n
	}
	return out
}

// runCensus publishes this edge's census every interval, and that it is
// gone when the server closes.
func (s *Server) runCensus(sub *nats.Subscription) {
	t := time.NewTicker(s.admit.census.interval)
	defer t.Stop()
	publish := func(msg censusMsg) {
		if b, err := json.Marshal(msg); err == nil {
			_ = s.nc.Publish(bus.PushCensusSubject, b) // a lost census only ages the peers' view
		}
	}
	for {
		select {
		case <-s.stop:
			_ = sub.Unsubscribe()
			publish(censusMsg{Edge: s.o.NodeID, Gone: true})
			return
		case now := <-t.C:
			s.admitMu.Lock()
			s.admit.census.expire(now)
			msg := s.ownCensus()
			s.admitMu.Unlock()
			publish(msg)
		}
	}
}
