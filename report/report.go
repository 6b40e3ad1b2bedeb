// Package report builds the SLA report of a period (docs/reports.md) —
// per API and per owner, from the edges' per-minute records (otel's
// jetway_sla stream), the registry's entries and its audit trail — and
// writes it as Markdown, one self-contained HTML page or JSON. `jetway
// report`, the scheduled reports and the admin API (GET /v1/reports) all
// build it here, so they answer alike.
package report

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/otel"
	"github.com/jetway-gw/jetway/registry"
)

// Options are what a report covers and how it is written.
type Options struct {
	From, Until time.Time
	Format      string // md, html or json
	API, Owner  string
	Target      float64 // percent
	Top         int
}

// Inputs are what a report is made of (Read).
type Inputs struct {
	minutes  []otel.SLAMinute
	noStream bool
	apis     map[string]apiInfo // by name
	switches []registry.Change  // degrade and fault
	changes  []registry.Change  // api
	notes    []string
}

// apiInfo is what the registry says of an API: its pool and owner.
type apiInfo struct {
	Pool  string
	Owner string
}

// unowned is the owner of an API whose entry names none.
const unowned = registry.Unowned

// Read reads a report's inputs: the period's SLA records, the APIs in
// force and the audit trail's switches and registry changes.
func Read(ctx context.Context, js jetstream.JetStream, c *registry.Client, o Options) (Inputs, error) {
	in := Inputs{apis: map[string]apiInfo{}}
	var err error
	in.minutes, err = otel.ReadSLA(ctx, js, o.From, o.Until)
	if errors.Is(err, otel.ErrNoSLAStream) {
		in.noStream, err = true, nil
	}
	if err != nil {
		return in, err
	}
	// The entries in force: an invalid newest revision is not served, and
	// its owner is not the API's.
	entries, err := c.ListInForce(ctx)
	if err != nil {
		return in, err
	}
	for _, f := range entries {
		a := f.API
		if a == nil {
			continue
		}
		if _, seen := in.apis[a.Name]; seen && f.Entry.Name != a.Name {
			continue // the entry under the API's own key wins (not its draft)
		}
		in.apis[a.Name] = apiInfo{Pool: a.Pool, Owner: cmp.Or(a.Owner, unowned)}
	}
	for _, kind := range []string{"degrade", "fault", "api"} {
		chs, err := c.Audit(ctx, o.From, kind, 100_000)
		if err != nil {
			in.notes = append(in.notes, "the audit trail could not be read ("+err.Error()+"): switches and registry changes are missing")
			break
		}
		for _, ch := range chs {
			if ch.At.Before(o.From) || !ch.At.Before(o.Until) {
				continue
			}
			if kind == "api" {
				in.changes = append(in.changes, ch)
			} else {
				in.switches = append(in.switches, ch)
			}
		}
	}
	return in, nil
}

// The report, as JSON and as the templates read it. Percentages are
// 0–100; latencies milliseconds.
type Report struct {
	From      time.Time      `json:"from"`
	Until     time.Time      `json:"until"`
	Generated time.Time      `json:"generated"`
	Target    float64        `json:"target_percent"`
	Rule      string         `json:"rule"`
	Filter    string         `json:"filter,omitempty"`
	Note      string         `json:"note,omitempty"`
	Notes     []string       `json:"notes,omitempty"`
	Nodes     int            `json:"nodes"`
	Records   int            `json:"records"`
	Total     Stats          `json:"total"`
	Owners    []OwnerReport  `json:"owners"`
	APIs      []APIReport    `json:"apis"`
	Slowest   []SlowAPI      `json:"slowest"`
	Below     []Window       `json:"windows_below_target"`
	Errors    []ErrorCount   `json:"errors"`
	Breakers  []BreakerEvent `json:"breakers_opened"`
	Switches  []ChangeEvent  `json:"switches_flipped"`
	Changes   []ChangeEvent  `json:"registry_changes"`
}

type Stats struct {
	Calls          int64   `json:"calls"`
	Succeeded      int64   `json:"succeeded"`
	GatewayFailed  int64   `json:"gateway_failures"`
	BackendFailed  int64   `json:"backend_failures"`
	Refused        int64   `json:"refused"`
	Availability   float64 `json:"availability_percent"`
	Windows        int     `json:"windows"` // 5-minute windows with calls the SLA counts
	WindowsBelow   int     `json:"windows_below_target"`
	WorstWindow    *Window `json:"worst_window,omitempty"`
	P50            float64 `json:"p50_ms"`
	P90            float64 `json:"p90_ms"`
	P99            float64 `json:"p99_ms"`
	P999           float64 `json:"p999_ms"`
	BreakersOpened int     `json:"breakers_opened"`
}

type OwnerReport struct {
	Owner string   `json:"owner"`
	APIs  []string `json:"apis"`
	Stats
}

type APIReport struct {
	API     string   `json:"api"`
	Owner   string   `json:"owner"`
	Pool    string   `json:"pool,omitempty"`
	Changed []string `json:"changed_on,omitempty"` // days (UTC) the registry entry changed
	Stats
}

type SlowAPI struct {
	API   string  `json:"api"`
	Owner string  `json:"owner"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Calls int64   `json:"calls"`
}

type Window struct {
	Start        time.Time `json:"start"`
	API          string    `json:"api,omitempty"`
	Owner        string    `json:"owner,omitempty"`
	Calls        int64     `json:"sla_calls"`
	Succeeded    int64     `json:"succeeded"`
	Availability float64   `json:"availability_percent"`
}

type ErrorCount struct {
	API   string `json:"api"`
	Code  string `json:"code"`
	Kind  string `json:"kind"`  // failed, blocked
	Cause string `json:"cause"` // gateway, backend, refused
	Count int64  `json:"count"`
}

type BreakerEvent struct {
	At     time.Time `json:"at"`
	API    string    `json:"api"`
	Owner  string    `json:"owner"`
	Worker string    `json:"worker"`
	Reason string    `json:"reason,omitempty"`
}

type ChangeEvent struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"`
	Action string    `json:"action"`
	API    string    `json:"api"`
	Owner  string    `json:"owner"`
	Actor  string    `json:"actor"`
}

// apiAcc gathers one API's (or owner's) figures.
type apiAcc struct {
	stats    otel.SLAStats
	windows  map[time.Time]*[2]int64 // succeeded, SLA calls
	breakers int
}

func newAcc() *apiAcc { return &apiAcc{windows: map[time.Time]*[2]int64{}} }

func (a *apiAcc) add(at time.Time, s otel.SLAStats) {
	a.stats.Merge(s)
	w := at.UTC().Truncate(otel.SLAWindow)
	c := a.windows[w]
	if c == nil {
		c = new([2]int64)
		a.windows[w] = c
	}
	c[0] += s.Succeeded
	c[1] += s.SLACalls()
}

// baseAPI is an API's name without its tier (orders.get@sandbox).
func baseAPI(key string) string { name, _, _ := strings.Cut(key, "@"); return name }

// Build makes the report of in.
func Build(in Inputs, o Options) *Report {
	r := &Report{From: o.From, Until: o.Until, Generated: time.Now().UTC(), Target: o.Target,
		Rule: "availability = successes ÷ (successes + gateway-caused failures) per 5-minute window (UTC-aligned); " +
			"the backend's failures (its own error statuses, CLASSIFIED, BAD_GATEWAY, CIRCUIT_OPEN) and calls refused on purpose are left out; " +
			"the period's figure is the same ratio over all its calls",
		Notes: in.notes}
	switch {
	case o.API != "":
		r.Filter = "api " + o.API
	case o.Owner != "":
		r.Filter = "owner " + o.Owner
	}
	ownerOf := func(key string) string {
		if a, ok := in.apis[baseAPI(key)]; ok {
			return a.Owner
		}
		return unowned
	}
	keep := func(key string) bool {
		if o.API != "" && key != o.API && baseAPI(key) != o.API {
			return false
		}
		return o.Owner == "" || ownerOf(key) == o.Owner
	}
	apis, owners, total := map[string]*apiAcc{}, map[string]*apiAcc{}, newAcc()
	pools := map[string]string{}
	nodes := map[string]bool{}
	for _, m := range in.minutes {
		nodes[m.Node] = true
		for _, a := range m.APIs {
			if !keep(a.API) {
				continue
			}
			r.Records++
			if apis[a.API] == nil {
				apis[a.API] = newAcc()
			}
			ow := ownerOf(a.API)
			if owners[ow] == nil {
				owners[ow] = newAcc()
			}
			apis[a.API].add(m.Minute, a.SLAStats)
			owners[ow].add(m.Minute, a.SLAStats)
			total.add(m.Minute, a.SLAStats)
			if a.Pool != "" {
				pools[a.API] = a.Pool
			}
		}
	}
	r.Nodes = len(nodes)
	// Breakers opened: each opening once, however many edges heard it,
	// and only one announced on the API's own pool's subject.
	seen := map[string]bool{}
	for _, m := range in.minutes {
		for _, b := range m.Breakers {
			if seen[b.Key()] || !keep(b.API) || b.At.Before(o.From) || !b.At.Before(o.Until) {
				continue
			}
			if info, ok := in.apis[b.API]; ok && bus.PoolToken(info.Pool) != b.PoolToken {
				continue
			}
			seen[b.Key()] = true
			r.Breakers = append(r.Breakers, BreakerEvent{At: b.At, API: b.API, Owner: ownerOf(b.API), Worker: b.Worker, Reason: b.Reason})
			if apis[b.API] == nil {
				apis[b.API] = newAcc()
			}
			apis[b.API].breakers++
			ow := ownerOf(b.API)
			if owners[ow] == nil {
				owners[ow] = newAcc()
			}
			owners[ow].breakers++
			total.breakers++
		}
	}
	slices.SortFunc(r.Breakers, func(a, b BreakerEvent) int { return a.At.Compare(b.At) })
	for _, ch := range in.switches {
		if keep(ch.Key) {
			r.Switches = append(r.Switches, ChangeEvent{At: ch.At, Kind: ch.Kind, Action: flipAction(ch), API: ch.Key, Owner: ownerOf(ch.Key), Actor: ch.Actor})
		}
	}
	slices.SortFunc(r.Switches, func(a, b ChangeEvent) int { return a.At.Compare(b.At) })
	changed := map[string][]string{}
	for _, ch := range in.changes {
		if !keep(ch.Key) {
			continue
		}
		r.Changes = append(r.Changes, ChangeEvent{At: ch.At, Kind: ch.Kind, Action: ch.Action, API: ch.Key, Owner: ownerOf(ch.Key), Actor: ch.Actor})
		if day := ch.At.UTC().Format(time.DateOnly); !slices.Contains(changed[ch.Key], day) {
			changed[ch.Key] = append(changed[ch.Key], day)
		}
	}
	slices.SortFunc(r.Changes, func(a, b ChangeEvent) int { return a.At.Compare(b.At) })

	r.Total = stats(total, o.Target, "", "", nil)
	for _, name := range slices.Sorted(maps.Keys(apis)) {
		acc := apis[name]
		ow := ownerOf(name)
		ar := APIReport{API: name, Owner: ow, Pool: cmp.Or(pools[name], in.apis[baseAPI(name)].Pool), Changed: changed[baseAPI(name)],
			Stats: stats(acc, o.Target, name, ow, &r.Below)}
		r.APIs = append(r.APIs, ar)
		for _, code := range slices.Sorted(maps.Keys(acc.stats.Failed)) {
			r.Errors = append(r.Errors, ErrorCount{API: name, Code: code, Kind: "failed", Cause: otel.FailureCause(code).String(), Count: acc.stats.Failed[code]})
		}
		for _, reason := range slices.Sorted(maps.Keys(acc.stats.Blocked)) {
			r.Errors = append(r.Errors, ErrorCount{API: name, Code: reason, Kind: "blocked", Cause: otel.BlockCause(reason).String(), Count: acc.stats.Blocked[reason]})
		}
	}
	for _, ow := range slices.Sorted(maps.Keys(owners)) {
		or := OwnerReport{Owner: ow, Stats: stats(owners[ow], o.Target, "", ow, nil)}
		for _, a := range r.APIs {
			if a.Owner == ow {
				or.APIs = append(or.APIs, a.API)
			}
		}
		r.Owners = append(r.Owners, or)
	}
	slow := slices.Clone(r.APIs)
	slow = slices.DeleteFunc(slow, func(a APIReport) bool { return a.Calls == 0 })
	slices.SortStableFunc(slow, func(a, b APIReport) int { return cmp.Compare(b.P99, a.P99) })
	for _, a := range slow[:min(len(slow), o.Top)] {
		r.Slowest = append(r.Slowest, SlowAPI{API: a.API, Owner: a.Owner, P99: a.P99, P999: a.P999, Calls: a.Calls})
	}
	slices.SortStableFunc(r.Below, func(a, b Window) int {
		return cmp.Or(a.Start.Compare(b.Start), strings.Compare(a.API, b.API))
	})
	if r.Records == 0 {
		switch {
		case in.noStream:
			r.Note = "No SLA records: the stream jetway_sla does not exist yet (no edge has stored a minute)."
		default:
			r.Note = fmt.Sprintf("No SLA records between %s and %s%s.", o.From.Format(time.RFC3339), o.Until.Format(time.RFC3339), filterSuffix(r.Filter))
		}
	}
	ensureSlices(r)
	return r
}

func filterSuffix(f string) string {
	if f == "" {
		return ""
	}
	return " for " + f
}

// ensureSlices makes empty lists [] in JSON rather than null.
func ensureSlices(r *Report) {
	if r.Owners == nil {
		r.Owners = []OwnerReport{}
	}
	if r.APIs == nil {
		r.APIs = []APIReport{}
	}
	if r.Slowest == nil {
		r.Slowest = []SlowAPI{}
	}
	if r.Below == nil {
		r.Below = []Window{}
	}
	if r.Errors == nil {
		r.Errors = []ErrorCount{}
	}
	if r.Breakers == nil {
		r.Breakers = []BreakerEvent{}
	}
	if r.Switches == nil {
		r.Switches = []ChangeEvent{}
	}
	if r.Changes == nil {
		r.Changes = []ChangeEvent{}
	}
}

// flipAction says what a switch's change did: a put turns it on (or
// changes it), a delete turns it off.
func flipAction(ch registry.Change) string {
	switch ch.Action {
	case "put":
		return "on"
	case "delete":
		return "off"
	}
	return ch.Action
}

// stats are an accumulator's figures; windows below target are added to
// below (when not nil) as the API's.
func stats(a *apiAcc, target float64, api, owner string, below *[]Window) Stats {
	s := a.stats
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	rs := Stats{Calls: s.Calls(), Succeeded: s.Succeeded, GatewayFailed: s.Failures(otel.CauseGateway),
		BackendFailed: s.Failures(otel.CauseBackend), Refused: s.Failures(otel.CauseRefused),
		Availability: 100 * s.Availability(), P50: ms(s.Latency.Quantile(0.5)), P90: ms(s.Latency.Quantile(0.9)),
		P99: ms(s.Latency.Quantile(0.99)), P999: ms(s.Latency.Quantile(0.999)), BreakersOpened: a.breakers}
	for _, start := range slices.SortedFunc(maps.Keys(a.windows), time.Time.Compare) {
		c := a.windows[start]
		if c[1] == 0 {
			continue
		}
		rs.Windows++
		w := Window{Start: start, API: api, Owner: owner, Calls: c[1], Succeeded: c[0], Availability: 100 * float64(c[0]) / float64(c[1])}
		if w.Availability < target {
			rs.WindowsBelow++
			if below != nil {
				*below = append(*below, w)
			}
		}
		if rs.WorstWindow == nil || w.Availability < rs.WorstWindow.Availability {
			rs.WorstWindow = &w
		}
	}
	return rs
}
