package push

import (
	"cmp"
	"encoding/json"
	"maps"
	"net/netip"
	"slices"
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
// Only edges may publish a census (bus.RolePermissions), and edges enforce
// the caps: a compromised edge is bound by none, it admits what it likes.
// What a forged census adds is bounded like an honest one (entries, counts
// up to the cap, peers up to resilience.MaxClusterPeers, all of them
// together up to maxCensusTotal): it can make the other edges refuse for
// three intervals, or hide connections from them by posing as another
// edge — never more than the edge credentials already allow.

// CensusInterval is how often an edge with a cluster-wide cap publishes
// its census.
const CensusInterval = time.Second

// maxCensusEntries bounds the apps and the addresses of one census, sent
// or received (the largest counts are sent first); maxCensusTotal the
// entries kept of all peers together (a census past it is dropped).
const (
	maxCensusEntries = 20000
	maxCensusTotal   = 200000
)

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

func (p *peerCensus) size() int { return len(p.apps) + len(p.ips) }

// census is an edge's view of its peers' connections, under admitMu. A
// peer's census replaces its last one whole (a pointer swap: parsed
// before the lock); a connect adds up the peers' counts of its app and
// address, one map lookup a peer.
type census struct {
	interval time.Duration
	peers    map[string]*peerCensus // by edge id
	total    int                    // the entries of all peers
}

func newCensus(interval time.Duration) *census {
	if interval <= 0 {
		interval = CensusInterval
	}
	return &census{interval: interval, peers: map[string]*peerCensus{}}
}

// counts are the peers' connections of app and from host. admitMu held.
func (c *census) counts(app string, host netip.Prefix) (apps, ips int) {
	for _, p := range c.peers {
		apps += p.apps[app]
		if host.IsValid() {
			ips += p.ips[host]
		}
	}
	return apps, ips
}

// forget drops a peer's census. admitMu held.
func (c *census) forget(id string) {
	if p := c.peers[id]; p != nil {
		c.total -= p.size()
		delete(c.peers, id)
	}
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

// receiveCensus applies a peer's census.
func (s *Server) receiveCensus(m *nats.Msg) {
	var msg censusMsg
	if json.Unmarshal(m.Data, &msg) != nil || msg.Edge == "" || msg.Edge == s.o.NodeID {
		return
	}
	a := s.admit
	p := &peerCensus{at: time.Now()}
	if a.clusterApp > 0 {
		p.apps = make(map[string]int, min(len(msg.Apps), maxCensusEntries))
		for k, n := range msg.Apps {
			if len(p.apps) == maxCensusEntries {
				break
			}
			if n > 0 && bus.ValidName(k) == nil {
				p.apps[k] = min(n, a.clusterApp)
			}
		}
	}
	if a.clusterIP > 0 {
		p.ips = make(map[netip.Prefix]int, min(len(msg.IPs), maxCensusEntries))
		for k, n := range msg.IPs {
			if len(p.ips) == maxCensusEntries {
				break
			}
			if pf, err := netip.ParsePrefix(k); err == nil && n > 0 && pf == pf.Masked() && pf.Bits() == hostBits(pf.Addr()) {
				p.ips[pf] = min(n, a.clusterIP)
			}
		}
	}
	s.admitMu.Lock()
	defer s.admitMu.Unlock()
	c := a.census
	if msg.Gone {
		c.forget(msg.Edge)
		return
	}
	old := c.peers[msg.Edge]
	if old == nil && len(c.peers) >= resilience.MaxClusterPeers {
		if c.expire(p.at); len(c.peers) >= resilience.MaxClusterPeers {
			return
		}
	}
	grow := p.size()
	if old != nil {
		grow -= old.size()
	}
	if c.total+grow > maxCensusTotal {
		return // the peers' censuses are as large as this edge keeps
	}
	c.peers[msg.Edge] = p
	c.total += grow
}

// ownCensus is this edge's census now: the counts are copied under
// admitMu, chosen and encoded outside it.
func (s *Server) ownCensus() []byte {
	a := s.admit
	s.admitMu.Lock()
	var apps map[string]int
	var ips map[netip.Prefix]int
	if a.clusterApp > 0 {
		apps = maps.Clone(a.byApp)
	}
	if a.clusterIP > 0 {
		ips = maps.Clone(a.byIP)
	}
	peers := len(a.census.peers)
	s.admitMu.Unlock()
	least := max(1, a.clusterIP/(4*(peers+1)))
	limit := maxCensusEntries
	for {
		msg := censusMsg{Edge: s.o.NodeID, Apps: topCounts(apps, 1, limit, func(k string) string { return k }),
			IPs: topCounts(ips, least, limit, netip.Prefix.String)}
		b, _ := json.Marshal(msg)
		if int64(len(b)) <= s.nc.MaxPayload() || limit <= 1 {
			return b
		}
		// Past what the server takes: the largest counts, fewer of them.
		if !s.censusTrimmed.Swap(true) {
			s.log.Warn("push: the connection census is larger than the NATS server's max_payload: sending the largest counts only", "bytes", len(b), "max_payload", s.nc.MaxPayload())
		}
		limit /= 2
	}
}

// topCounts are the counts of at least least, at most limit of them (the
// largest), keyed by name; nil for none.
func topCounts[K comparable](counts map[K]int, least, limit int, name func(K) string) map[string]int {
	type kv struct {
		k K
		n int
	}
	var all []kv
	for k, n := range counts {
		if n >= least {
			all = append(all, kv{k, n})
		}
	}
	if len(all) == 0 {
		return nil
	}
	if len(all) > limit {
		slices.SortFunc(all, func(a, b kv) int { return cmp.Compare(b.n, a.n) })
		all = all[:limit]
	}
	out := make(map[string]int, len(all))
	for _, e := range all {
		out[name(e.k)] = e.n
	}
	return out
}

// runCensus publishes this edge's census every interval, and that it is
// gone when the server closes; done is closed then.
func (s *Server) runCensus(sub *nats.Subscription, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(s.admit.census.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			_ = sub.Unsubscribe()
			b, _ := json.Marshal(censusMsg{Edge: s.o.NodeID, Gone: true})
			_ = s.nc.Publish(bus.PushCensusSubject, b)
			_ = s.nc.Flush()
			return
		case now := <-t.C:
			s.admitMu.Lock()
			s.admit.census.expire(now)
			s.admitMu.Unlock()
			if err := s.nc.Publish(bus.PushCensusSubject, s.ownCensus()); err != nil {
				s.log.Warn("push: publishing the connection census (the other edges stop counting this one's after three seconds)", "err", err)
			}
		}
	}
}
