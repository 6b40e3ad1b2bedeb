package edge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/resilience"
)

// ClusterSubject carries the edges' cluster-wide rate-limit reports. Every
// edge publishes one message per interval — its id and, per cluster-wide
// rule, what it admitted over the window, its demand and its allowance —
// which doubles as its heartbeat: an edge silent for three intervals no
// longer counts. There is no token server to fail: each edge decides alone
// from what its peers last said (resilience.ClusterLimiter).
const ClusterSubject = bus.RateLimitSubject

// DefaultClusterInterval is how often edges exchange reports.
const DefaultClusterInterval = 100 * time.Millisecond

type clusterMsg struct {
	Edge  string                              `json:"edge"`
	Rules map[string]resilience.ClusterReport `json:"rules,omitempty"`
}

// cluster is the edge's side of the report exchange.
type cluster struct {
	id       string
	interval time.Duration

	mu      sync.Mutex
	members map[string]time.Time  // peer edges by id: when last heard
	rules   map[string]*limitRule // cluster-wide rules by rule id
}

func newCluster(interval time.Duration) *cluster {
	if interval <= 0 {
		interval = DefaultClusterInterval
	}
	return &cluster{id: nuid.Next(), interval: interval, members: map[string]time.Time{}, rules: map[string]*limitRule{}}
}

// clusterRuleID names a cluster-wide rule the same way on every edge: the
// API and a digest of the rule as written.
func clusterRuleID(api string, fp []byte) string {
	sum := sha256.Sum256(fp)
	return api + "/" + hex.EncodeToString(sum[:8])
}

// live is the number of edges heard from recently, this one included.
func (c *cluster) live(now time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 1
	for id, at := range c.members {
		if now.Sub(at) > 3*c.interval {
			delete(c.members, id)
			continue
		}
		n++
	}
	return n
}

// newLimiter builds a cluster-wide rule's limiter and registers it for the
// exchange.
func (c *cluster) newLimiter(id string, r *registry.RateLimit, lr *limitRule) error {
	cl, err := resilience.NewClusterLimiter(r.Rule(), c.interval, c.live(time.Now()))
	if err != nil {
		return err
	}
	lr.cluster, lr.clusterID = cl, id
	return nil
}

// setRules replaces the set of cluster-wide rules (after a registry change).
func (c *cluster) setRules(rules map[string]*limitRule) {
	c.mu.Lock()
	c.rules = rules
	c.mu.Unlock()
}

// receive applies a peer's report. Only edges may publish reports, and
// each report is bounded by what one honest edge can say
// (resilience.ClusterLimiter.Observe); the edges kept are bounded too, so
// forged ids cannot grow the table or the live count without end.
func (c *cluster) receive(m *nats.Msg) {
	var msg clusterMsg
	if json.Unmarshal(m.Data, &msg) != nil || msg.Edge == "" || msg.Edge == c.id {
		return
	}
	now := time.Now()
	c.mu.Lock()
	if _, known := c.members[msg.Edge]; !known && len(c.members) >= resilience.MaxClusterPeers {
		for id, at := range c.members {
			if now.Sub(at) > 3*c.interval {
				delete(c.members, id)
			}
		}
		if len(c.members) >= resilience.MaxClusterPeers {
			c.mu.Unlock()
			return
		}
	}
	c.members[msg.Edge] = now
	rules := c.rules
	c.mu.Unlock()
	for id, rep := range msg.Rules {
		if lr := rules[id]; lr != nil {
			lr.cluster.Observe(msg.Edge, rep, now)
		}
	}
}

// run exchanges reports until ctx ends.
func (c *cluster) run(ctx context.Context, nc *nats.Conn) error {
	sub, err := nc.Subscribe(ClusterSubject, c.receive)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-t.C:
			c.mu.Lock()
			msg := clusterMsg{Edge: c.id, Rules: make(map[string]resilience.ClusterReport, len(c.rules))}
			for id, lr := range c.rules {
				msg.Rules[id] = lr.cluster.Tick(now)
			}
			c.mu.Unlock()
			b, _ := json.Marshal(msg)
			_ = nc.Publish(ClusterSubject, b) // a lost report only ages the peers' view
		}
	}
}
