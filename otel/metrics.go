package otel

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetway-gw/jetway/bus"
)

// MetricsSubjectPrefix starts the subject each node publishes its
// per-second records on: jetway.metrics.<role>.<node id>, a JSON array of
// Record.
const MetricsSubjectPrefix = bus.MetricsPrefix

// Outcome is how a call ended, as its caller saw it.
type Outcome uint8

const (
	// Succeeded: the backend (or a fallback) answered below 500.
	Succeeded Outcome = iota
	// Blocked: the gateway refused the call on purpose (rate limit,
	// degrade switch, open circuit, overload, authentication).
	Blocked
	// Failed: the call failed — a gateway error (timeout, unreachable
	// backend, no workers) or a backend 5xx.
	Failed
)

// Reasons and codes counted by name; any other counts as "other".
var (
	blockReasons = []string{"RATE_LIMITED", "DEGRADED", "CIRCUIT_OPEN", "OVERLOADED", "UNAUTHENTICATED", "FORBIDDEN", "PAYLOAD_TOO_LARGE", "BAD_REQUEST", "INVALID_REQUEST", "NO_SANDBOX", "other"}
	failCodes    = []string{"GATEWAY_TIMEOUT", "BAD_GATEWAY", "NO_WORKERS", "BUS_UNAVAILABLE", "BUS_LOST", "WIRE_VERSION", "INTERNAL", "BACKEND_5XX", "FAULT_INJECTED", "CLASSIFIED", "other"}
)

// Metrics are a node's per-API call metrics: counters, latency histograms
// with ~1 % precision, and per-second records kept for an hour. Record is
// lock-free for an API seen before.
type Metrics struct {
	node, role string
	started    time.Time

	mu   sync.Mutex // guards adding APIs and apps (copy-on-write) and the ring
	apis atomic.Pointer[map[string]*apiMetrics]
	apps atomic.Pointer[map[string]*appMetrics]
	ring secondRing

	chanView channelView // the channels' states, from their events (channels.go)

	accessDropped func() int64 // set once before serving (CountAccessLogDrops)
}

// CountAccessLogDrops has /metrics report dropped(), the access log lines
// dropped because its buffer was full, as jetway_access_log_dropped_total.
// Call it before WritePrometheus is first called.
func (m *Metrics) CountAccessLogDrops(dropped func() int64) { m.accessDropped = dropped }

// appMetrics count one authenticated app's calls across every API, by
// outcome. Apps come from the registry, so their number is bounded.
type appMetrics [3]atomic.Int64

// outcomeNames label outcomes in metrics.
var outcomeNames = [3]string{Succeeded: "succeeded", Blocked: "blocked", Failed: "failed"}

type apiMetrics struct {
	name, pool string
	requests   atomic.Int64
	succeeded  atomic.Int64
	blocked    map[string]*atomic.Int64
	failed     map[string]*atomic.Int64
	hist       *histogram
	faults     [2]atomic.Int64                 // injected by a drill: delays, aborts
	shed       atomic.Int64                    // refused by the edge's shedding (also blocked OVERLOADED)
	cache      [len(cacheResults)]atomic.Int64 // response cache lookups, by cacheResults
	// channels count the calls of an API with a channel set by the
	// channel that answered (copy-on-write under Metrics.mu; channels.go).
	channels atomic.Pointer[map[string]*channelCounts]
	// the current second, swapped by Tick
	sec   atomic.Pointer[secAcc]
	spare *secAcc
}

type secAcc struct {
	pass, block, success, fail atomic.Int64
	hist                       *histogram
}

func newSecAcc() *secAcc { return &secAcc{hist: newHistogram()} }

// NewMetrics returns empty metrics for a node.
func NewMetrics(node, role string) *Metrics {
	m := &Metrics{node: node, role: role, started: time.Now()}
	m.apis.Store(&map[string]*apiMetrics{})
	m.apps.Store(&map[string]*appMetrics{})
	m.ring.init(3600, 1_000_000)
	return m
}

// cowLookup returns the value of key in the map behind p, adding mk()
// under mu when it is missing. The map is copied on write, so a lookup of a
// key seen before never locks.
func cowLookup[T any](mu *sync.Mutex, p *atomic.Pointer[map[string]*T], key string, mk func() *T) *T {
	if v := (*p.Load())[key]; v != nil {
		return v
	}
	mu.Lock()
	defer mu.Unlock()
	cur := *p.Load()
	if v := cur[key]; v != nil {
		return v
	}
	v := mk()
	next := maps.Clone(cur)
	next[key] = v
	p.Store(&next)
	return v
}

func (m *Metrics) api(name, pool string) *apiMetrics {
	return cowLookup(&m.mu, &m.apis, name, func() *apiMetrics {
		a := &apiMetrics{name: name, pool: pool, hist: newHistogram(), spare: newSecAcc(),
			blocked: map[string]*atomic.Int64{}, failed: map[string]*atomic.Int64{}}
		for _, r := range blockReasons {
			a.blocked[r] = new(atomic.Int64)
		}
		for _, c := range failCodes {
			a.failed[c] = new(atomic.Int64)
		}
		a.sec.Store(newSecAcc())
		a.channels.Store(&map[string]*channelCounts{})
		return a
	})
}

// RecordFault counts one fault a drill injected into an API's call: an
// abort, or a delay.
func (m *Metrics) RecordFault(api, pool string, abort bool) {
	i := 0
	if abort {
		i = 1
	}
	m.api(api, pool).faults[i].Add(1)
}

// RecordShed counts one call the edge's load shedding refused before
// sending it (it is also counted blocked, OVERLOADED, by Record).
func (m *Metrics) RecordShed(api, pool string) { m.api(api, pool).shed.Add(1) }

// cacheResults name the response cache lookups RecordCache counts.
var cacheResults = [4]string{"hit", "miss", "stale", "shared"}

// RecordCache counts one response cache lookup of an API: "hit", "miss"
// or "stale" (an answer served past its freshness).
func (m *Metrics) RecordCache(api, pool, result string) {
	for i, r := range cacheResults {
		if r == result {
			m.api(api, pool).cache[i].Add(1)
			return
		}
	}
}

// RecordApp counts one call of an authenticated app (whatever API it
// called), by outcome.
func (m *Metrics) RecordApp(app string, o Outcome) {
	if int(o) < len(outcomeNames) {
		cowLookup(&m.mu, &m.apps, app, func() *appMetrics { return new(appMetrics) })[o].Add(1)
	}
}

// Record counts one call of an API. reason is the gateway error code for
// blocked and failed calls ("" for a backend's own 5xx).
func (m *Metrics) Record(api, pool string, o Outcome, reason string, latency time.Duration) {
	a := m.api(api, pool)
	a.requests.Add(1)
	a.hist.record(latency)
	s := a.sec.Load()
	s.hist.record(latency)
	switch o {
	case Succeeded:
		a.succeeded.Add(1)
		s.pass.Add(1)
		s.success.Add(1)
	case Blocked:
		counter(a.blocked, reason).Add(1)
		s.block.Add(1)
	case Failed:
		if reason == "" {
			reason = "BACKEND_5XX"
		}
		counter(a.failed, reason).Add(1)
		s.pass.Add(1)
		s.fail.Add(1)
	}
}

func counter(m map[string]*atomic.Int64, k string) *atomic.Int64 {
	if c := m[k]; c != nil {
		return c
	}
	return m["other"]
}

// Record is one API's second, in the style of Sentinel's metric log.
type Record struct {
	At      time.Time     `json:"ts"`
	API     string        `json:"api"`
	Node    string        `json:"node,omitempty"`
	Pass    int64         `json:"pass"`
	Block   int64         `json:"block"`
	Success int64         `json:"success"`
	Error   int64         `json:"error"`
	Avg     time.Duration `json:"avg_ns"`
	P50     time.Duration `json:"p50_ns"`
	P90     time.Duration `json:"p90_ns,omitempty"` // absent in records of releases before it
	P99     time.Duration `json:"p99_ns"`
	P999    time.Duration `json:"p999_ns,omitempty"`
	// Channels are the calls of an API with a channel set by the channel
	// that answered, those of the second that had any.
	Channels []ChannelCalls `json:"channels,omitempty"`
}

// Line formats r as "ts_ms|api|pass|block|success|error|avg_ms|p99_ms".
func (r Record) Line() string {
	return fmt.Sprintf("%d|%s|%d|%d|%d|%d|%.3f|%.3f", r.At.UnixMilli(), r.API, r.Pass, r.Block, r.Success, r.Error,
		float64(r.Avg)/1e6, float64(r.P99)/1e6)
}

// Tick closes the second that ends at now: each API's counts of the
// second become a Record in the ring. Call it once a second; it returns the
// records of the second (to publish them).
func (m *Metrics) Tick(now time.Time) []Record {
	var out []Record
	for _, a := range *m.apis.Load() {
		fresh := a.spare
		old := a.sec.Swap(fresh)
		hs := old.hist.snapshot()
		r := Record{At: now.Truncate(time.Second).Add(-time.Second), API: a.name, Node: m.node,
			Pass: old.pass.Load(), Block: old.block.Load(), Success: old.success.Load(), Error: old.fail.Load(),
			Avg: hs.mean(), P50: hs.quantile(0.5), P90: hs.quantile(0.9), P99: hs.quantile(0.99), P999: hs.quantile(0.999)}
		old.pass.Store(0)
		old.block.Store(0)
		old.success.Store(0)
		old.fail.Store(0)
		old.hist.reset()
		a.spare = old
		r.Channels = a.tickChannels()
		if r.Pass+r.Block > 0 || len(r.Channels) > 0 {
			out = append(out, r)
		}
	}
	m.mu.Lock()
	m.ring.add(now, out)
	m.mu.Unlock()
	return out
}

// Run calls Tick every second until stop is closed; publish, if not nil,
// gets each second's records.
func (m *Metrics) Run(stop <-chan struct{}, publish func([]Record)) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			if rs := m.Tick(now); publish != nil && len(rs) > 0 {
				publish(rs)
			}
		}
	}
}

// Records returns the kept records of an API ("" for all) between start
// and end (zero: unbounded), oldest first, at most max (0: all).
func (m *Metrics) Records(api string, start, end time.Time, max int) []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ring.find(api, start, end, max)
}

// WritePrometheus writes every metric in the Prometheus text format.
func (m *Metrics) WritePrometheus(w io.Writer) error {
	bw := bufio.NewWriter(w)
	apis := slices.SortedFunc(maps.Values(*m.apis.Load()), func(a, b *apiMetrics) int { return strings.Compare(a.name, b.name) })
	lbl := func(a *apiMetrics) string {
		return fmt.Sprintf(`api=%q,pool=%q,node=%q,role=%q`, a.name, a.pool, m.node, m.role)
	}
	fmt.Fprintln(bw, "# HELP jetway_requests_total Calls received per API.")
	fmt.Fprintln(bw, "# TYPE jetway_requests_total counter")
	for _, a := range apis {
		fmt.Fprintf(bw, "jetway_requests_total{%s} %d\n", lbl(a), a.requests.Load())
	}
	fmt.Fprintln(bw, "# HELP jetway_requests_passed_total Calls not blocked by the gateway (they reached a worker, or were answered by a fallback).")
	fmt.Fprintln(bw, "# TYPE jetway_requests_passed_total counter")
	for _, a := range apis {
		fmt.Fprintf(bw, "jetway_requests_passed_total{%s} %d\n", lbl(a), a.requests.Load()-sum(a.blocked))
	}
	fmt.Fprintln(bw, "# HELP jetway_requests_succeeded_total Calls answered below 500 by the backend or a fallback.")
	fmt.Fprintln(bw, "# TYPE jetway_requests_succeeded_total counter")
	for _, a := range apis {
		fmt.Fprintf(bw, "jetway_requests_succeeded_total{%s} %d\n", lbl(a), a.succeeded.Load())
	}
	fmt.Fprintln(bw, "# HELP jetway_requests_blocked_total Calls the gateway refused on purpose, by reason.")
	fmt.Fprintln(bw, "# TYPE jetway_requests_blocked_total counter")
	for _, a := range apis {
		for _, r := range blockReasons {
			if n := a.blocked[r].Load(); n > 0 {
				fmt.Fprintf(bw, "jetway_requests_blocked_total{%s,reason=%q} %d\n", lbl(a), r, n)
			}
		}
	}
	fmt.Fprintln(bw, "# HELP jetway_requests_failed_total Calls that failed, by error code (BACKEND_5XX: the backend's own).")
	fmt.Fprintln(bw, "# TYPE jetway_requests_failed_total counter")
	for _, a := range apis {
		for _, c := range failCodes {
			if n := a.failed[c].Load(); n > 0 {
				fmt.Fprintf(bw, "jetway_requests_failed_total{%s,code=%q} %d\n", lbl(a), c, n)
			}
		}
	}
	counters := func(name, help, label string, values []string, n func(a *apiMetrics, i int) int64) {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s counter\n", name, help, name)
		for _, a := range apis {
			for i, v := range values {
				if c := n(a, i); c > 0 {
					fmt.Fprintf(bw, "%s{%s,%s=%q} %d\n", name, lbl(a), label, v, c)
				}
			}
		}
	}
	counters("jetway_faults_injected_total", "Faults a drill (jetway fault on) injected, by kind: calls delayed, calls aborted.",
		"kind", []string{"delay", "abort"}, func(a *apiMetrics, i int) int64 { return a.faults[i].Load() })
	fmt.Fprintln(bw, "# HELP jetway_requests_shed_total Calls the edge refused itself (OVERLOADED) because the API's workers were refusing calls; counted in jetway_requests_blocked_total too.")
	fmt.Fprintln(bw, "# TYPE jetway_requests_shed_total counter")
	for _, a := range apis {
		if n := a.shed.Load(); n > 0 {
			fmt.Fprintf(bw, "jetway_requests_shed_total{%s} %d\n", lbl(a), n)
		}
	}
	counters("jetway_cache_lookups_total", "Response cache lookups, by result: hit, miss, stale (served past freshness: stale-while-revalidate or stale-if-error), shared (a hit read from the shared cache).",
		"result", cacheResults[:], func(a *apiMetrics, i int) int64 { return a.cache[i].Load() })
	m.writeChannels(bw, apis, lbl)
	fmt.Fprintln(bw, "# HELP jetway_availability Share of passed calls (not blocked) that did not fail, since start.")
	fmt.Fprintln(bw, "# TYPE jetway_availability gauge")
	for _, a := range apis {
		failed, blocked := sum(a.failed), sum(a.blocked)
		avail := 1.0
		if passed := a.requests.Load() - blocked; passed > 0 {
			avail = 1 - float64(failed)/float64(passed)
		}
		fmt.Fprintf(bw, "jetway_availability{%s} %s\n", lbl(a), strconv.FormatFloat(avail, 'g', 6, 64))
	}
	fmt.Fprintln(bw, "# HELP jetway_request_duration_seconds Latency of calls as the caller saw it.")
	fmt.Fprintln(bw, "# TYPE jetway_request_duration_seconds histogram")
	les := []time.Duration{time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond,
		50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2500 * time.Millisecond,
		5 * time.Second, 10 * time.Second}
	snaps := make([]histSnapshot, len(apis))
	for i, a := range apis {
		s := a.hist.snapshot()
		snaps[i] = s
		for _, le := range les {
			fmt.Fprintf(bw, "jetway_request_duration_seconds_bucket{%s,le=%q} %d\n", lbl(a), strconv.FormatFloat(le.Seconds(), 'g', -1, 64), s.below(le))
		}
		fmt.Fprintf(bw, "jetway_request_duration_seconds_bucket{%s,le=\"+Inf\"} %d\n", lbl(a), s.total)
		fmt.Fprintf(bw, "jetway_request_duration_seconds_sum{%s} %s\n", lbl(a), strconv.FormatFloat(s.sum.Seconds(), 'g', -1, 64))
		fmt.Fprintf(bw, "jetway_request_duration_seconds_count{%s} %d\n", lbl(a), s.total)
	}
	fmt.Fprintln(bw, "# HELP jetway_request_duration_quantile_seconds Latency quantiles since start, within ~1 %.")
	fmt.Fprintln(bw, "# TYPE jetway_request_duration_quantile_seconds gauge")
	for i, a := range apis {
		for _, q := range []string{"0.5", "0.9", "0.99", "0.999"} {
			qf, _ := strconv.ParseFloat(q, 64)
			fmt.Fprintf(bw, "jetway_request_duration_quantile_seconds{%s,quantile=%q} %s\n", lbl(a), q,
				strconv.FormatFloat(snaps[i].quantile(qf).Seconds(), 'g', 6, 64))
		}
	}
	fmt.Fprintln(bw, "# HELP jetway_app_requests_total Calls of authenticated apps across all APIs, by outcome.")
	fmt.Fprintln(bw, "# TYPE jetway_app_requests_total counter")
	apps := *m.apps.Load()
	for _, id := range slices.Sorted(maps.Keys(apps)) {
		for o, name := range outcomeNames {
			if n := apps[id][o].Load(); n > 0 {
				fmt.Fprintf(bw, "jetway_app_requests_total{app=%q,outcome=%q,node=%q,role=%q} %d\n", id, name, m.node, m.role, n)
			}
		}
	}
	if m.accessDropped != nil {
		fmt.Fprintln(bw, "# HELP jetway_access_log_dropped_total Access log lines dropped because the log's buffer was full (its output too slow).")
		fmt.Fprintln(bw, "# TYPE jetway_access_log_dropped_total counter")
		fmt.Fprintf(bw, "jetway_access_log_dropped_total{node=%q,role=%q} %d\n", m.node, m.role, m.accessDropped())
	}
	fmt.Fprintln(bw, "# HELP jetway_uptime_seconds Seconds since the node started.")
	fmt.Fprintln(bw, "# TYPE jetway_uptime_seconds gauge")
	fmt.Fprintf(bw, "jetway_uptime_seconds{node=%q,role=%q} %d\n", m.node, m.role, int64(time.Since(m.started).Seconds()))
	return bw.Flush()
}

// sum adds up a set of counters.
func sum(m map[string]*atomic.Int64) int64 {
	var n int64
	for _, c := range m {
		n += c.Load()
	}
	return n
}

// secondRing keeps per-second records for a bounded number of seconds and
// of records in all.
type secondRing struct {
	seconds    [][]Record
	at         []time.Time
	next       int
	maxRecords int
	records    int
}

func (r *secondRing) init(seconds, maxRecords int) {
	r.seconds, r.at, r.maxRecords = make([][]Record, seconds), make([]time.Time, seconds), maxRecords
}

func (r *secondRing) add(now time.Time, recs []Record) {
	r.records -= len(r.seconds[r.next])
	r.seconds[r.next], r.at[r.next] = recs, now
	r.records += len(recs)
	r.next = (r.next + 1) % len(r.seconds)
	// Over the record budget: drop the oldest seconds.
	for i := r.next; r.records > r.maxRecords; i = (i + 1) % len(r.seconds) {
		r.records -= len(r.seconds[i])
		r.seconds[i] = nil
	}
}

func (r *secondRing) find(api string, start, end time.Time, max int) []Record {
	var out []Record
	for k := 0; k < len(r.seconds); k++ {
		i := (r.next + k) % len(r.seconds)
		for _, rec := range r.seconds[i] {
			if (api == "" || rec.API == api) && (start.IsZero() || !rec.At.Before(start)) && (end.IsZero() || !rec.At.After(end)) {
				out = append(out, rec)
			}
		}
	}
	if max > 0 && len(out) > max {
		out = out[len(out)-max:]
	}
	return out
}
