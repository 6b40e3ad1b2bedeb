package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// Site indexes of an edge's bus.Sites.
const (
	sitePrimary = 0
	siteStandby = 1
)

// failover moves an edge's calls between its primary NATS cluster and a
// standby cluster (--nats-standby): to the standby when the primary has
// been unhealthy for --failover-after — unreachable, or without the
// quorum of its own nodes (its registry stream has no leader or no
// majority of current replicas: the cluster's own view of how many of
// its nodes are there) — and back once it has been healthy for
// --failback-after (0: only when told, POST /site on the admin
// listener). Every move is logged, published on jetway.events.site on
// both clusters and counted (jetway_site_moves_total).
type failover struct {
	n     *node
	sites *bus.Sites
	conns []*nats.Conn // each site's, for the move events
	after time.Duration
	back  time.Duration

	mu        sync.Mutex
	pin       int // -1: automatic; else the site told to use
	badSince  time.Time
	goodSince time.Time
	moves     int64
	lastWhy   string
}

// siteEvent is what a move publishes on bus.SiteEventSubject.
type siteEvent struct {
	Node   string    `json:"node"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// primaryHealth says whether the primary can take calls, and if not why.
func (f *failover) primaryHealth() (bool, string) {
	if l := f.sites.Link(sitePrimary); !l.Up() {
		st, why, since := l.State()
		return false, fmt.Sprintf("primary %s since %s: %s", st, since.UTC().Format(time.RFC3339), why)
	}
	if h := f.n.watcher.Health(); h.State == registry.HealthQuorumLost {
		return false, "primary lost its quorum: " + h.Reason
	}
	return true, ""
}

// decide is the rule, on the clock now: the site calls should go to, and
// why when it is a move.
func (f *failover) decide(now time.Time, primaryOK bool, why string, standbyUp bool) (int, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	active, _ := f.sites.Active()
	if primaryOK {
		f.badSince = time.Time{}
		if f.goodSince.IsZero() {
			f.goodSince = now
		}
	} else {
		f.goodSince = time.Time{}
		if f.badSince.IsZero() {
			f.badSince = now
		}
	}
	switch {
	case f.pin >= 0:
		return f.pin, "told to (POST /site)"
	case active == sitePrimary && !primaryOK && standbyUp && now.Sub(f.badSince) >= f.after:
		return siteStandby, fmt.Sprintf("primary unhealthy for %s: %s", now.Sub(f.badSince).Round(time.Second), why)
	case active == siteStandby && primaryOK && f.back > 0 && now.Sub(f.goodSince) >= f.back:
		return sitePrimary, fmt.Sprintf("primary healthy again for %s", now.Sub(f.goodSince).Round(time.Second))
	}
	return active, ""
}

// run judges twice a second until ctx ends.
func (f *failover) run(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			ok, why := f.primaryHealth()
			to, reason := f.decide(now, ok, why, f.sites.Link(siteStandby).Up())
			f.move(to, reason)
		}
	}
}

// move makes site to the active one, saying so when it is a move.
func (f *failover) move(to int, reason string) {
	from, _ := f.sites.Active()
	if !f.sites.Use(to) {
		return
	}
	f.mu.Lock()
	f.moves++
	f.lastWhy = reason
	f.mu.Unlock()
	ev := siteEvent{Node: f.n.id, From: f.sites.Name(from), To: f.sites.Name(to), Reason: reason, At: time.Now().UTC()}
	f.n.log.Warn("calls moved to another nats cluster", "from", ev.From, "to", ev.To, "reason", reason)
	b, _ := json.Marshal(ev)
	for _, nc := range f.conns {
		_ = nc.Publish(bus.SiteEventSubject, b) // best effort: one of them may be down
	}
}

// serveHTTP is GET /site (the sites and which is active) and POST /site
// (?use=primary|standby|auto: pin one, or back to the automatic rule).
func (f *failover) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		// Not a form a web page could post to a tokenless loopback
		// listener: a JSON body, as POST /push/kick.
		var body struct {
			Use string `json:"use"`
		}
		if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") || json.NewDecoder(io.LimitReader(r.Body, 1024)).Decode(&body) != nil {
			http.Error(w, `POST {"use":"primary|standby|auto"} with Content-Type: application/json`, http.StatusBadRequest)
			return
		}
		use := body.Use
		pin := -1
		switch use {
		case "primary":
			pin = sitePrimary
		case "standby":
			pin = siteStandby
		case "auto":
		default:
			http.Error(w, `"use" is primary, standby or auto`, http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.pin = pin
		f.mu.Unlock()
		f.sites.Pin(pin >= 0)
		if pin >= 0 {
			f.move(pin, "told to (POST /site: "+use+")")
		}
	}
	active, since := f.sites.Active()
	f.mu.Lock()
	body := map[string]any{"active": f.sites.Name(active), "since": since.UTC().Format(time.RFC3339Nano),
		"moves": f.moves, "last_reason": f.lastWhy, "mode": "auto"}
	if f.pin >= 0 {
		body["mode"] = "pinned"
	}
	f.mu.Unlock()
	sites := map[string]any{}
	for i := range f.sites.Len() {
		st, why, _ := f.sites.Link(i).State()
		sites[f.sites.Name(i)] = map[string]any{"state": st, "reason": why}
	}
	body["sites"] = sites
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

// startFailover connects an edge with --nats-standby to its standby
// cluster and starts the failover between the two; nil sites without.
func (n *node) startFailover(ctx context.Context, primary *nats.Conn, primaryLink *bus.Link) (*bus.Sites, error) {
	if n.cfg.natsStandby == "" {
		return nil, nil
	}
	snc, slink, err := n.connectLinked(ctx, n.cfg.natsStandby, "jetway-edge-standby", bus.UserEdge)
	if err != nil {
		return nil, fmt.Errorf("standby nats: %w", err)
	}
	sites := bus.NewSites([]string{"primary", "standby"}, []*bus.Link{primaryLink, slink})
	n.failover = &failover{n: n, sites: sites, conns: []*nats.Conn{primary, snc}, after: n.cfg.failoverAfter, back: n.cfg.failbackAfter, pin: -1}
	fctx, stop := context.WithCancel(context.Background())
	n.onExit(stop)
	go n.failover.run(fctx)
	return sites, nil
}

// spare reports whether l is a site's link whose state does not make the
// node unready: calls do not go out on it now, or another site takes
// them while it is down (not while a site is pinned). /readyz still shows
// it (nil f: no link is spare).
func (f *failover) spare(l *bus.Link) bool {
	if f == nil {
		return false
	}
	for i := range f.sites.Len() {
		if f.sites.Link(i) == l {
			return l != f.sites.For() || f.sites.Elsewhere(l) != nil
		}
	}
	return false
}

// writeMetrics writes jetway_site_active{site} (1 for the site calls go
// to) and jetway_site_moves_total (nil f: nothing).
func (f *failover) writeMetrics(w io.Writer, n *node) {
	if f == nil {
		return
	}
	active, _ := f.sites.Active()
	f.mu.Lock()
	moves := f.moves
	f.mu.Unlock()
	fmt.Fprintln(w, "# HELP jetway_site_active 1 for the NATS cluster this edge's calls go to (primary or standby).")
	fmt.Fprintln(w, "# TYPE jetway_site_active gauge")
	for i := range f.sites.Len() {
		v := 0
		if i == active {
			v = 1
		}
		fmt.Fprintf(w, "jetway_site_active{node=%q,site=%q} %d\n", n.id, f.sites.Name(i), v)
	}
	fmt.Fprintln(w, "# HELP jetway_site_moves_total Moves of this edge's calls between its NATS clusters.")
	fmt.Fprintln(w, "# TYPE jetway_site_moves_total counter")
	fmt.Fprintf(w, "jetway_site_moves_total{node=%q} %d\n", n.id, moves)
}
