package resilience

import (
	"fmt"
	"sync"
	"time"
)

// ClusterLimiter is one side of a rate limit shared by several nodes (the
// edges of a cluster) without a token server: each node counts what it
// admits, reports its count and its demand to the others every interval
// (the transport is the caller's: Jetway uses NATS), and admits a call only
// while
//
//  1. its own count plus the last counts reported by the live peers stays
//     under Limit over the sliding Window, and
//  2. it has not yet spent, since the last report, its share of what is
//     left of Limit — the share is its demand over the total demand of the
//     live nodes, so that between two reports the nodes together can spend
//     at most what is left, even in a burst that hits them all at once.
//
// A peer that has not reported for three intervals is taken for dead and no
// longer counts. What the nodes admit together over a window exceeds Limit
// only by what the peers admitted in the last interval before they learned
// of each other's counts, which the shares keep small; one node alone gets
// the whole Limit.
//
// Pure logic: time is passed in; the caller runs the ticks and the
// transport. Safe for concurrent use.
type ClusterLimiter struct {
	limit    int64
	interval time.Duration
	win      rateWindow

	mu        sync.Mutex
	peers     map[string]peerReport
	demand    int64 // calls asked for since the last tick
	spent     int64 // calls admitted since the last tick
	allowance int64 // calls this node may admit until the next tick
	nodes     int64 // live nodes the caller knew of at creation
}

type peerReport struct {
	count, demand, allowance int64
	at                       time.Time
}

// ClusterReport is what a node tells its peers about one rule each tick.
type ClusterReport struct {
	// Count is what the node admitted over the sliding window.
	Count int64 `json:"count"`
	// Demand is how many calls it was asked for since its previous report.
	Demand int64 `json:"demand"`
	// Allowance is the most it will admit before its next report.
	Allowance int64 `json:"allowance"`
}

// NewClusterLimiter returns the limiter of a cluster-wide reject rule (the
// only behaviour a cluster scope supports: limit calls per window).
// interval is how often the caller will call Tick and exchange reports;
// nodes is how many nodes the caller knows to be live now (itself
// included), so that until the first reports each spends only its equal
// share of the limit.
func NewClusterLimiter(cfg RuleConfig, interval time.Duration, nodes int) (*ClusterLimiter, error) {
	if cfg.Behavior != "" && cfg.Behavior != BehaviorReject {
		return nil, fmt.Errorf("behavior: a cluster-wide rule must be %q, not %q", BehaviorReject, cfg.Behavior)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if interval <= 0 {
		return nil, fmt.Errorf("interval: %v is not positive", interval)
	}
	c := cfg.withDefaults()
	l := &ClusterLimiter{limit: int64(c.Limit), interval: interval, win: newRateWindow(c), peers: map[string]peerReport{}, nodes: int64(max(nodes, 1))}
	l.allowance = max(l.limit/int64(max(nodes, 1)), 1)
	return l, nil
}

// Take admits one call at now, or refuses it with a Retry-After hint of
// one interval (the earliest the shares change).
func (l *ClusterLimiter) Take(now time.Time) Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.demand++
	l.win.advance(now)
	if l.spent >= l.allowance || l.win.sum+l.peersLocked(now) >= l.limit {
		return Decision{RetryAfter: l.interval}
	}
	l.win.add()
	l.spent++
	return Decision{Allowed: true}
}

// peersLocked is the sum of the live peers' last counts.
func (l *ClusterLimiter) peersLocked(now time.Time) int64 {
	var sum int64
	for id, p := range l.peers {
		if now.Sub(p.at) > 3*l.interval {
			delete(l.peers, id)
			continue
		}
		sum += p.count
	}
	return sum
}

// MaxClusterPeers bounds the peers a ClusterLimiter keeps; reports of new
// peers past it are ignored until some fall silent.
const MaxClusterPeers = 1024

// Observe records a peer's report, received at now.
//
// Reports come off the network and may be forged, so each is bounded by
// what one honest node can report: count, demand and allowance are clamped
// to [0, Limit] (no node admits more than the limit, and demand beyond it
// weighs no more: such a node wants all of it). A forged report can then
// make the rule refuse for three intervals after it — as an honest node
// that admitted the whole limit would — but never admit more than Limit,
// and at most MaxClusterPeers peers are kept.
func (l *ClusterLimiter) Observe(peer string, r ClusterReport, now time.Time) {
	clamp := func(v int64) int64 { return min(max(v, 0), l.limit) }
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, known := l.peers[peer]; !known && len(l.peers) >= MaxClusterPeers {
		l.peersLocked(now) // drop the silent ones
		if len(l.peers) >= MaxClusterPeers {
			return
		}
	}
	l.peers[peer] = peerReport{count: clamp(r.Count), demand: clamp(r.Demand), allowance: clamp(r.Allowance), at: now}
}

// Tick ends an interval: it returns this node's report for the peers and
// computes its share of what is left for the next interval. What is left
// counts the peers' reported calls and the allowances they reported — the
// most each may admit before its next report — so that the nodes' views of
// what is left agree even though their reports cross.
func (l *ClusterLimiter) Tick(now time.Time) ClusterReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.win.advance(now)
	left := l.limit - l.win.sum - l.peersLocked(now)
	own := min(l.demand, l.limit) // weighed as the peers' (Observe)
	total, live := own, int64(1)
	for _, p := range l.peers {
		left -= p.allowance
		total += p.demand
		live++
	}
	if unknown := l.nodes - live; unknown > 0 {
		// Peers not heard from yet may be spending their first
		// allowance (limit/nodes each), and take a share of the rest.
		left -= unknown * (l.limit / l.nodes)
		live = l.nodes
	}
	switch {
	case left <= 0:
		l.allowance = 0
	case total == 0 || live > int64(len(l.peers))+1:
		l.allowance = max(left/live, 1)
	default:
		l.allowance = max(left*own/total, 1)
	}
	r := ClusterReport{Count: l.win.sum, Demand: l.demand, Allowance: l.allowance}
	l.demand, l.spent = 0, 0
	return r
}

// Peers is the number of live peers known.
func (l *ClusterLimiter) Peers(now time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.peersLocked(now)
	return len(l.peers)
}
