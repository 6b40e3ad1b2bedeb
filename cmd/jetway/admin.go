package main

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/registry"
)

// readiness is /readyz's word on the registry: ready while it follows
// NATS, and also while it serves a snapshot that stopped following (watch
// broken, quorum lost) for less than --ready-max-stale — a registry
// outage must not take every edge out of its load balancer at once,
// when the calls themselves need no registry — saying why; not ready
// with nothing loaded, or a snapshot staler than that.
func (n *node) readiness(now time.Time) (bool, string, registry.Health) {
	h := n.watcher.Health()
	if h.Live {
		s := n.watcher.Current()
		return true, fmt.Sprintf("registry live at revision %d (%d apis, %d degraded)", s.Revision, len(s.APIs), len(s.Degrade)), h
	}
	if n.watcher.Current().Source == registry.SourceNone {
		return false, h.Reason, h
	}
	if f := n.failover; f != nil {
		if active, _ := f.sites.Active(); active != sitePrimary {
			// The primary's registry is out of reach because the primary
			// is; the calls go to the standby, whose workers follow its
			// mirror: no staleness limit here, or every edge would go
			// unready together in a long outage.
			return true, "calls on the standby nats cluster; " + h.Reason, h
		}
	}
	if limit := n.cfg.readyMaxStale; limit > 0 && !h.Since.IsZero() && now.Sub(h.Since) > limit {
		return false, fmt.Sprintf("%s; stale for %s, past --ready-max-stale %s", h.Reason, now.Sub(h.Since).Round(time.Second), limit), h
	}
	return true, h.Reason, h
}

// writeLinkMetrics writes what the call connections' links counted
// (bus.Link.Counts): calls a lost connection interrupted, calls sent
// again on the next, reconnects forced on a server that stopped
// answering.
func (n *node) writeLinkMetrics(w io.Writer) {
	if len(n.links) == 0 {
		return
	}
	var b strings.Builder
	for _, m := range []struct {
		name, help string
		value      func(interrupted, resent, forced int64) int64
	}{
		{"jetway_nats_calls_interrupted_total", "Calls in flight when their NATS connection was lost or found dead.",
			func(i, _, _ int64) int64 { return i }},
		{"jetway_nats_calls_resent_total", "Idempotent calls sent again on the next NATS connection after their connection was lost.",
			func(_, r, _ int64) int64 { return r }},
		{"jetway_nats_forced_reconnects_total", "NATS servers left because they stopped answering while calls waited on them.",
			func(_, _, f int64) int64 { return f }},
	} {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n", m.name, m.help, m.name)
		for _, l := range n.links {
			fmt.Fprintf(&b, "%s{node=%q,role=%q,conn=%q} %d\n", m.name, n.id, n.role, l.name, m.value(l.link.Counts()))
		}
	}
	_, _ = io.WriteString(w, b.String())
}

// adminHandler serves the admin listener: /healthz answers while the
// process runs; /readyz answers 200 when the node can carry calls (its
// call connections up, a registry loaded and not too stale: readiness)
// and is not draining, and 503 with the reason otherwise.
func (n *node) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ready, reason, reg := n.readiness(time.Now())
		nats := map[string]any{}
		carries := true // every call connection is up
		for _, l := range n.links {
			state, why, since := l.link.State()
			st := map[string]any{"state": state}
			if state != bus.LinkUp {
				st["reason"], st["since"] = why, since.UTC().Format(time.RFC3339Nano)
				if carries && !n.failover.spare(l.link) { // this node cannot carry calls: that first
					carries, ready = false, false
					reason = fmt.Sprintf("nats connection of the %s %s since %s: %s; %s", l.name, state, since.UTC().Format(time.RFC3339), why, reason)
				}
			}
			nats[l.name] = st
		}
		if n.draining.Load() {
			ready, reason = false, "draining: shutting down"
		}
		s := n.watcher.Current()
		body := map[string]any{
			"ready":    ready,
			"reason":   reason,
			"role":     n.role,
			"registry": map[string]any{"source": s.Source.String(), "revision": s.Revision, "apis": len(s.APIs), "state": reg.State},
			"wire":     map[string]any{"reads": []int{bus.WireMinVersion, bus.WireVersion}, "writes": n.wire.Send()},
		}
		if len(nats) > 0 {
			body["nats"] = nats
		}
		if n.edge != nil {
			body["routes"] = n.edge.Routes()
			body["edges"] = n.edge.Edges()
		}
		if n.worker != nil {
			body["serving"] = n.worker.Subscribed()
			body["in_flight"] = n.worker.InFlight()
		}
		w.Header().Set("Content-Type", "application/json")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	})
	mux.Handle("GET /nodes", n.tracker)
	mux.HandleFunc("/site", func(w http.ResponseWriter, r *http.Request) {
		if n.failover == nil {
			http.Error(w, "this node has no standby cluster (edge --nats-standby)", http.StatusNotFound)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodPost {
			http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
			return
		}
		n.failover.serveHTTP(w, r)
	})
	mux.HandleFunc("GET /push", func(w http.ResponseWriter, _ *http.Request) {
		if n.push == nil {
			http.Error(w, "this node serves no push clients (edges do)", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(n.push.Stats())
	})
	mux.HandleFunc("GET /push/connections", func(w http.ResponseWriter, r *http.Request) {
		if n.push == nil {
			http.Error(w, "this node serves no push clients (edges do)", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"connections": n.push.Connections(r.URL.Query().Get("app"), maxListedConns)})
	})
	// A JSON body, so that a web page cannot post it across origins
	// without a preflight (the listener may have no token on loopback).
	mux.HandleFunc("POST /push/kick", func(w http.ResponseWriter, r *http.Request) {
		var k struct{ App, Topic string }
		switch {
		case n.push == nil:
			http.Error(w, "this node serves no push clients (edges do)", http.StatusNotFound)
			return
		case r.Header.Get("Content-Type") != "application/json":
			http.Error(w, `POST /push/kick takes Content-Type: application/json`, http.StatusUnsupportedMediaType)
			return
		case json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&k) != nil || k.App == "":
			http.Error(w, `kick whose connections? {"app":"ID"} (and "topic":"NAME")`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int{"kicked": n.push.Kick(k.App, k.Topic, "ended by an operator")})
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		if n.metrics != nil {
			_ = n.metrics.WritePrometheus(w)
		}
		if n.push != nil {
			_ = n.push.WritePrometheus(w, n.id)
		}
		if n.worker != nil {
			n.writeWireMetrics(w)
			_ = n.worker.WriteJobMetrics(w, n.id)
			_ = n.worker.WriteChannelMetrics(w, n.id)
		}
		n.writeJobQueueMetrics(w)
		n.writeLinkMetrics(w)
		n.failover.writeMetrics(w, n)
	})
	mux.HandleFunc("GET /metric", func(w http.ResponseWriter, r *http.Request) {
		if n.metrics == nil {
			http.Error(w, "this node serves no calls (metrics are kept by edges)", http.StatusNotFound)
			return
		}
		q := r.URL.Query()
		start, err1 := parseTime(q.Get("start"))
		end, err2 := parseTime(q.Get("end"))
		maxLines, err3 := strconv.Atoi(q.Get("max_lines"))
		if q.Get("max_lines") == "" {
			maxLines, err3 = 0, nil
		}
		if err := errors.Join(err1, err2, err3); err != nil {
			http.Error(w, "bad query: "+err.Error()+" (start, end: Unix ms or RFC 3339; max_lines: a number)", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "# timestamp_ms|api|pass|block|success|error|avg_ms|p99_ms")
		for _, rec := range n.metrics.Records(q.Get("api"), start, end, maxLines) {
			fmt.Fprintln(w, rec.Line())
		}
	})
	if n.cfg.pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// parseTime reads Unix milliseconds or RFC 3339; "" is the zero time.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	return time.Parse(time.RFC3339, s)
}

// maxListedConns bounds GET /push/connections (the oldest first).
const maxListedConns = 10000

// requireToken guards the admin listener with a bearer token, except
// /healthz and /readyz, which load balancers and orchestrators probe
// without credentials (they tell no more than up or ready and why). The
// scheme name is case-insensitive (RFC 7235); the tokens are compared as
// SHA-256 digests in constant time, so neither the time taken nor an early
// return on a length mismatch tells how much of a guess was right or how
// long the token is.
func requireToken(token string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			next.ServeHTTP(w, r)
			return
		}
		if got, ok := edge.CutAuthScheme(r.Header.Get("Authorization"), "Bearer"); ok {
			sum := sha256.Sum256([]byte(got))
			if subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
				next.ServeHTTP(w, r)
				return
			}
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="jetway-admin"`)
		http.Error(w, "the admin listener needs Authorization: Bearer <admin token>", http.StatusUnauthorized)
	})
}

// Admin tokens must be at least minAdminTokenLen printable ASCII
// characters (no spaces: they travel in a header) with at least
// minAdminTokenDistinct different ones. 32 characters is 128 bits of
// entropy in the weakest usual encoding of random bytes (hex, as
// openssl rand -hex 16 makes); the distinct count refuses the obvious
// non-random ones ("aaaa…", "abab…", "12341234…") without pretending to
// measure entropy. Random hex of 32 characters has fewer than 8 different
// ones with a probability under 1e-7.
const (
	minAdminTokenLen      = 32
	minAdminTokenDistinct = 8
)

// checkAdminToken refuses a weak admin token, naming the rule; "" (no
// token) is checkAdminAddr's business.
func checkAdminToken(token string) error {
	if token == "" {
		return nil
	}
	distinct := map[rune]bool{}
	for _, c := range token {
		if c < '!' || c > '~' {
			return fmt.Errorf("%w: --admin-token (or JETWAY_ADMIN_TOKEN) must be printable ASCII without spaces (make one with: openssl rand -hex 32)", errUsage)
		}
		distinct[c] = true
	}
	if len(token) < minAdminTokenLen || len(distinct) < minAdminTokenDistinct {
		return fmt.Errorf("%w: --admin-token (or JETWAY_ADMIN_TOKEN) is too weak: it needs at least %d characters, at least %d of them different (it has %d, %d different); make one with: openssl rand -hex 32",
			errUsage, minAdminTokenLen, minAdminTokenDistinct, len(token), len(distinct))
	}
	return nil
}

// checkAdminAddr refuses an admin listener reachable from other hosts
// without a token.
func checkAdminAddr(addr, token string) error {
	if addr == "" || token != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: --admin %q: %v", errUsage, addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: the admin listener %s is not on loopback: set --admin-token (or JETWAY_ADMIN_TOKEN), or bind it to 127.0.0.1", errUsage, addr)
}

// writeWireMetrics writes a worker's count of the requests it received by
// wire version: once no node writes the previous version any more (its
// count stops growing), a rolling upgrade is complete.
func (n *node) writeWireMetrics(w io.Writer) {
	counts := n.worker.WireRequests()
	fmt.Fprintln(w, "# HELP jetway_worker_wire_requests_total Requests received by this worker, by the wire version they were written in (unread: a version it does not read).")
	fmt.Fprintln(w, "# TYPE jetway_worker_wire_requests_total counter")
	for _, v := range slices.Sorted(maps.Keys(counts)) {
		fmt.Fprintf(w, "jetway_worker_wire_requests_total{version=%q,node=%q,role=%q} %d\n", v, n.id, n.role, counts[v])
	}
}

// adminBootstrapToken is the admin API's first admin token: --admin-token,
// or one made at the first start and kept in <data>/admin-token (mode
// 0600), so that the quick start's API needs no flag and no token is ever
// empty.
func (n *node) adminBootstrapToken() (string, error) {
	if n.cfg.adminToken != "" {
		return n.cfg.adminToken, nil
	}
	path := filepath.Join(n.cfg.dataDir, "admin-token")
	if fi, err := os.Lstat(path); err == nil {
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
			return "", fmt.Errorf("%s must be a regular file only its owner reads (mode 0600), not %v", path, fi.Mode())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		t := strings.TrimSpace(string(b))
		if err := checkAdminToken(t); err != nil || t == "" {
			return "", fmt.Errorf("%s does not hold a usable admin token (delete it and serve makes a new one): %v", path, err)
		}
		n.log.Info("admin API token", "file", path)
		return t, nil
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	t := hex.EncodeToString(b[:])
	if err := os.MkdirAll(n.cfg.dataDir, 0o700); err != nil {
		return "", err
	}
	// Made new, never through a link, never over another's: two serves
	// sharing a data folder get one token or an error.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("keeping the admin API token: %w", err)
	}
	_, werr := f.WriteString(t + "\n")
	if err := errors.Join(werr, f.Close()); err != nil {
		return "", fmt.Errorf("keeping the admin API token: %w", err)
	}
	n.log.Info("admin API token made", "file", path)
	return t, nil
}
