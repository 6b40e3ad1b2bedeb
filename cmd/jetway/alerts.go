package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/otel"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

// runAlerts evaluates the registry's alert rules once a second. Every
// serve and edge node follows the cluster's per-second records and breaker
// events, but only one judges and reports: the live serve or edge node
// with the smallest id (from the heartbeats), so an alert fires once for
// the cluster, and another node takes over within seconds when it goes.
func (n *node) runAlerts(ctx context.Context, nc *nats.Conn) error {
	a := otel.NewAlerts()
	subs := []*nats.Subscription{}
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	s1, err := nc.Subscribe(otel.MetricsSubjectPrefix+">", func(m *nats.Msg) {
		var rs []otel.Record
		if json.Unmarshal(m.Data, &rs) != nil {
			return
		}
		// A node speaks only for itself: jetway.metrics.<role>.<id>.
		node := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		rs = slices.DeleteFunc(rs, func(r otel.Record) bool { return r.Node != node })
		a.ObserveRecords(rs, time.Now())
	})
	if err != nil {
		return err
	}
	subs = append(subs, s1)
	s2, err := nc.Subscribe(workers.BreakerSubjectPrefix+">", func(m *nats.Msg) {
		var ev workers.BreakerEvent
		if json.Unmarshal(m.Data, &ev) != nil {
			return
		}
		// Only an event of the API's own pool counts, as for workers.
		if api := n.watcher.Current().APIs[ev.API]; api != nil && m.Subject == bus.BreakerSubject(api.Pool, ev.API) {
			a.ObserveBreaker(ev.API, ev.To)
		}
	})
	if err != nil {
		return err
	}
	subs = append(subs, s2)
	s4, err := otel.FollowChannelEvents(nc, func(ev otel.ChannelEvent) {
		// Only an event of the API's own pool, of a channel its entry
		// lists, counts, as for breakers.
		if api := n.watcher.Current().APIs[ev.API]; api != nil && ev.PoolToken == bus.PoolToken(api.Pool) && listsChannel(api, ev.Channel) {
			a.ObserveChannel(ev)
		}
	})
	if err != nil {
		return err
	}
	subs = append(subs, s4)
	s5, err := otel.FollowReleaseEvents(nc, func(ev otel.ReleaseEvent) {
		// As for channels: only an event of the API's own pool, for an
		// API whose entry has a release, counts.
		if api := n.watcher.Current().APIs[ev.API]; api != nil && api.Release != nil && ev.PoolToken == bus.PoolToken(api.Pool) {
			a.ObserveRelease(ev)
		}
	})
	if err != nil {
		return err
	}
	subs = append(subs, s5)
	s3, err := nc.Subscribe(bus.SiteEventSubject, func(m *nats.Msg) {
		var ev siteEvent
		if json.Unmarshal(m.Data, &ev) == nil && ev.Node != "" && (ev.To == "primary" || ev.To == "standby") {
			a.ObserveSite(ev.Node, ev.To)
		}
	})
	if err != nil {
		return err
	}
	subs = append(subs, s3)
	hooks := make(chan otel.AlertEvent, 64) // bounded: a slow webhook never holds up evaluation
	go n.postWebhooks(ctx, hooks)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var jobsSeen time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			if q := n.jobQueues.Load(); q != nil && q.at != jobsSeen {
				a.ObserveJobs(q.list, q.at)
				jobsSeen = q.at
			}
			if f := n.failover; f != nil {
				active, _ := f.sites.Active()
				a.ObserveSite(n.id, f.sites.Name(active)) // its own, whichever cluster is up
			}
			// Only live edges' sites count: an event from a node that
			// does not beat (forged, or gone) is forgotten.
			edges := map[string]bool{n.id: true}
			for _, hb := range n.tracker.Nodes(now) {
				if hb.Role == string(roleEdge) || hb.Role == string(roleServe) {
					edges[hb.ID] = true
				}
			}
			a.KeepSites(func(node string) bool { return edges[node] })
			// A channel gone from its API's entry (or its API deleted) is
			// forgotten: its channel_cut alert resolves.
			apis := n.watcher.Current().APIs
			a.KeepChannels(func(api, channel string) bool { return listsChannel(apis[api], channel) })
			a.KeepReleases(func(api string) bool { return apis[api] != nil && apis[api].Release != nil })
			if !n.alertLeader(now) {
				n.firing.Store(nil) // another node judges: its beats say what fires
				continue
			}
			for _, ev := range a.Evaluate(now, n.watcher.Current().Alerts, func(pool string) bool { return n.poolServed(pool, now) }) {
				n.log.Warn("alert "+ev.State, "rule", ev.Rule, "target", ev.Target, "value", ev.Value, "limit", ev.Limit, "message", ev.Message)
				if b, err := json.Marshal(ev); err == nil {
					_ = nc.Publish(otel.AlertSubjectPrefix+ev.Rule+"."+ev.Target, b)
				}
				if ev.Webhook != "" {
					select {
					case hooks <- ev:
					default:
						n.log.Warn("alert webhook queue full; event not posted", "rule", ev.Rule)
					}
				}
			}
			firing := a.Firing()
			n.firing.Store(&firing)
		}
	}
}

// listsChannel reports whether an API's entry lists a channel.
func listsChannel(a *registry.API, channel string) bool {
	return a != nil && slices.ContainsFunc(a.Channels, func(c registry.Channel) bool { return c.Name == channel })
}

// alertLeader reports whether this node judges alerts now.
func (n *node) alertLeader(now time.Time) bool {
	for _, hb := range n.tracker.Nodes(now) {
		if (hb.Role == string(roleServe) || hb.Role == string(roleEdge)) && hb.ID < n.id {
			return false
		}
	}
	return true
}

// poolServed reports whether a live worker (or serve node) serves pool.
func (n *node) poolServed(pool string, now time.Time) bool {
	for _, hb := range n.tracker.Nodes(now) {
		if hb.Role == string(roleServe) || (hb.Role == string(roleWorker) && slices.Contains(hb.Pools, pool)) {
			return true
		}
	}
	return false
}

// postWebhooks POSTs alert events, one at a time, each within 5 s.
func (n *node) postWebhooks(ctx context.Context, events <-chan otel.AlertEvent) {
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-events:
			b, _ := json.Marshal(ev)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, ev.Webhook, bytes.NewReader(b))
			if err != nil {
				continue
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				n.log.Warn("alert webhook failed", "rule", ev.Rule, "err", err)
				continue
			}
			_ = resp.Body.Close()
			if resp.StatusCode >= 300 {
				n.log.Warn("alert webhook refused", "rule", ev.Rule, "status", resp.StatusCode)
			}
		}
	}
}
