package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html/template"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	texttemplate "text/template"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/otel"
	"github.com/jetway-gw/jetway/registry"
)

const reportUsage = `Usage: jetway report [flags]

The SLA report of a period, per API and per owner, from the edges'
per-minute records (stream jetway_sla, kept 35 days, every node's):
availability per 5-minute window (a year has 105,120) and over the period,
TP50/90/99/999, calls, errors by code, the slowest APIs by p99, breakers
opened, degrade and fault switches flipped, registry changes of the APIs.

Availability is successes ÷ (successes + the gateway's failures): the
backend's own failures (its error statuses, CLASSIFIED, BAD_GATEWAY,
CIRCUIT_OPEN) and calls refused on purpose (RATE_LIMITED, UNAUTHENTICATED,
FORBIDDEN, BAD_REQUEST, INVALID_REQUEST, PAYLOAD_TOO_LARGE, DEGRADED, ...)
are left out; every other failure (GATEWAY_TIMEOUT, NO_WORKERS, BUS_LOST,
BUS_UNAVAILABLE, INTERNAL, OVERLOADED, FAULT_INJECTED, ...) counts against
it. The period's figure is the same ratio over all its calls.

--since and --until take a duration back from now (24h, 7d), a date
(2006-01-02) or a time (RFC 3339).

Delivery to each owner, daily or weekly, by webhook or mail:
  jetway report schedule put FILE|- | list | delete OWNER
  jetway report send OWNER [--since 24h]    (jetway report schedule -h)

Flags:
`

// reportFlags are what a report covers and how it is written.
type reportFlags struct {
	from, until time.Time
	format      string
	api, owner  string
	target      float64 // percent
	top         int
}

func cmdReport(args []string, stdout, stderr io.Writer) error {
	return cmdReportIn(args, os.Stdin, stdout, stderr)
}

// cmdReportIn is jetway report, and its subcommands schedule and send
// (reportsched.go).
func cmdReportIn(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "schedule":
			return cmdReportSchedule(args[1:], stdin, stdout, stderr)
		case "send":
			return cmdReportSend(args[1:], stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("jetway report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	if t := fs.Lookup("timeout"); t != nil {
		_ = t.Value.Set("30s")
		t.DefValue = "30s"
	}
	since := fs.String("since", "24h", "start of the period: a duration back from now (24h, 7d), a date or an RFC 3339 time")
	until := fs.String("until", "", "end of the period (same forms); default now")
	format := fs.String("format", "md", "md, html (one self-contained page) or json")
	api := fs.String("api", "", "only this API (and its sandbox tier)")
	owner := fs.String("owner", "", `only the APIs of this owner ("unowned": those without one)`)
	target := fs.Float64("target", 99.99, "availability target in percent: windows below it are listed")
	top := fs.Int("top", 10, "how many of the slowest APIs to list")
	fs.Usage = func() {
		fmt.Fprint(stderr, reportUsage)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: jetway report takes no arguments, got %q", errUsage, pos)
	}
	now := time.Now().UTC()
	o := reportFlags{format: *format, api: *api, owner: *owner, target: *target, top: *top}
	if o.from, err = parseWhen(*since, now); err != nil {
		return fmt.Errorf("%w: --since: %v", errUsage, err)
	}
	o.until = now
	if *until != "" {
		if o.until, err = parseWhen(*until, now); err != nil {
			return fmt.Errorf("%w: --until: %v", errUsage, err)
		}
	}
	switch {
	case !o.from.Before(o.until):
		return fmt.Errorf("%w: the period is empty: --since %s is not before --until %s", errUsage, o.from.Format(time.RFC3339), o.until.Format(time.RFC3339))
	case o.format != "md" && o.format != "html" && o.format != "json":
		return fmt.Errorf("%w: --format must be md, html or json, got %q", errUsage, o.format)
	case o.target <= 0 || o.target > 100 || o.top < 0:
		return fmt.Errorf("%w: --target must be in (0, 100] and --top not negative", errUsage)
	}
	ctx, c, js, done, err := rf.dialJS(1)
	if err != nil {
		return err
	}
	defer done()
	in, err := readReportInputs(ctx, js, c, o)
	if err != nil {
		return err
	}
	return writeReport(stdout, buildReport(in, o), o.format)
}

// parseWhen reads a point in time: a duration back from now (with d for
// days), a date (UTC) or an RFC 3339 time.
func parseWhen(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.ParseFloat(days, 64); err == nil && n > 0 {
			return now.Add(-time.Duration(n * 24 * float64(time.Hour))), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("%q: a duration must be positive", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is no duration (24h, 7d), date (2006-01-02) or RFC 3339 time", s)
}

// reportInputs are what a report is made of.
type reportInputs struct {
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

func readReportInputs(ctx context.Context, js jetstream.JetStream, c *registry.Client, o reportFlags) (reportInputs, error) {
	in := reportInputs{apis: map[string]apiInfo{}}
	var err error
	in.minutes, err = otel.ReadSLA(ctx, js, o.from, o.until)
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
		chs, err := c.Audit(ctx, o.from, kind, 100_000)
		if err != nil {
			in.notes = append(in.notes, "the audit trail could not be read ("+err.Error()+"): switches and registry changes are missing")
			break
		}
		for _, ch := range chs {
			if ch.At.Before(o.from) || !ch.At.Before(o.until) {
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
type slaReport struct {
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
	Total     reportStats    `json:"total"`
	Owners    []ownerReport  `json:"owners"`
	APIs      []apiReport    `json:"apis"`
	Slowest   []slowAPI      `json:"slowest"`
	Below     []windowReport `json:"windows_below_target"`
	Errors    []errorCount   `json:"errors"`
	Breakers  []breakerEvent `json:"breakers_opened"`
	Switches  []changeEvent  `json:"switches_flipped"`
	Changes   []changeEvent  `json:"registry_changes"`
}

type reportStats struct {
	Calls          int64         `json:"calls"`
	Succeeded      int64         `json:"succeeded"`
	GatewayFailed  int64         `json:"gateway_failures"`
	BackendFailed  int64         `json:"backend_failures"`
	Refused        int64         `json:"refused"`
	Availability   float64       `json:"availability_percent"`
	Windows        int           `json:"windows"` // 5-minute windows with calls the SLA counts
	WindowsBelow   int           `json:"windows_below_target"`
	WorstWindow    *windowReport `json:"worst_window,omitempty"`
	P50            float64       `json:"p50_ms"`
	P90            float64       `json:"p90_ms"`
	P99            float64       `json:"p99_ms"`
	P999           float64       `json:"p999_ms"`
	BreakersOpened int           `json:"breakers_opened"`
}

type ownerReport struct {
	Owner string   `json:"owner"`
	APIs  []string `json:"apis"`
	reportStats
}

type apiReport struct {
	API     string   `json:"api"`
	Owner   string   `json:"owner"`
	Pool    string   `json:"pool,omitempty"`
	Changed []string `json:"changed_on,omitempty"` // days (UTC) the registry entry changed
	reportStats
}

type slowAPI struct {
	API   string  `json:"api"`
	Owner string  `json:"owner"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Calls int64   `json:"calls"`
}

type windowReport struct {
	Start        time.Time `json:"start"`
	API          string    `json:"api,omitempty"`
	Owner        string    `json:"owner,omitempty"`
	Calls        int64     `json:"sla_calls"`
	Succeeded    int64     `json:"succeeded"`
	Availability float64   `json:"availability_percent"`
}

type errorCount struct {
	API   string `json:"api"`
	Code  string `json:"code"`
	Kind  string `json:"kind"`  // failed, blocked
	Cause string `json:"cause"` // gateway, backend, refused
	Count int64  `json:"count"`
}

type breakerEvent struct {
	At     time.Time `json:"at"`
	API    string    `json:"api"`
	Owner  string    `json:"owner"`
	Worker string    `json:"worker"`
	Reason string    `json:"reason,omitempty"`
}

type changeEvent struct {
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

func buildReport(in reportInputs, o reportFlags) *slaReport {
	r := &slaReport{From: o.from, Until: o.until, Generated: time.Now().UTC(), Target: o.target,
		Rule: "availability = successes ÷ (successes + gateway-caused failures) per 5-minute window (UTC-aligned); " +
			"the backend's failures (its own error statuses, CLASSIFIED, BAD_GATEWAY, CIRCUIT_OPEN) and calls refused on purpose are left out; " +
			"the period's figure is the same ratio over all its calls",
		Notes: in.notes}
	switch {
	case o.api != "":
		r.Filter = "api " + o.api
	case o.owner != "":
		r.Filter = "owner " + o.owner
	}
	ownerOf := func(key string) string {
		if a, ok := in.apis[baseAPI(key)]; ok {
			return a.Owner
		}
		return unowned
	}
	keep := func(key string) bool {
		if o.api != "" && key != o.api && baseAPI(key) != o.api {
			return false
		}
		return o.owner == "" || ownerOf(key) == o.owner
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
			if seen[b.Key()] || !keep(b.API) || b.At.Before(o.from) || !b.At.Before(o.until) {
				continue
			}
			if info, ok := in.apis[b.API]; ok && bus.PoolToken(info.Pool) != b.PoolToken {
				continue
			}
			seen[b.Key()] = true
			r.Breakers = append(r.Breakers, breakerEvent{At: b.At, API: b.API, Owner: ownerOf(b.API), Worker: b.Worker, Reason: b.Reason})
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
	slices.SortFunc(r.Breakers, func(a, b breakerEvent) int { return a.At.Compare(b.At) })
	for _, ch := range in.switches {
		if keep(ch.Key) {
			r.Switches = append(r.Switches, changeEvent{At: ch.At, Kind: ch.Kind, Action: flipAction(ch), API: ch.Key, Owner: ownerOf(ch.Key), Actor: ch.Actor})
		}
	}
	slices.SortFunc(r.Switches, func(a, b changeEvent) int { return a.At.Compare(b.At) })
	changed := map[string][]string{}
	for _, ch := range in.changes {
		if !keep(ch.Key) {
			continue
		}
		r.Changes = append(r.Changes, changeEvent{At: ch.At, Kind: ch.Kind, Action: ch.Action, API: ch.Key, Owner: ownerOf(ch.Key), Actor: ch.Actor})
		if day := ch.At.UTC().Format(time.DateOnly); !slices.Contains(changed[ch.Key], day) {
			changed[ch.Key] = append(changed[ch.Key], day)
		}
	}
	slices.SortFunc(r.Changes, func(a, b changeEvent) int { return a.At.Compare(b.At) })

	r.Total = stats(total, o.target, "", "", nil)
	for _, name := range slices.Sorted(maps.Keys(apis)) {
		acc := apis[name]
		ow := ownerOf(name)
		ar := apiReport{API: name, Owner: ow, Pool: cmp.Or(pools[name], in.apis[baseAPI(name)].Pool), Changed: changed[baseAPI(name)],
			reportStats: stats(acc, o.target, name, ow, &r.Below)}
		r.APIs = append(r.APIs, ar)
		for _, code := range slices.Sorted(maps.Keys(acc.stats.Failed)) {
			r.Errors = append(r.Errors, errorCount{API: name, Code: code, Kind: "failed", Cause: otel.FailureCause(code).String(), Count: acc.stats.Failed[code]})
		}
		for _, reason := range slices.Sorted(maps.Keys(acc.stats.Blocked)) {
			r.Errors = append(r.Errors, errorCount{API: name, Code: reason, Kind: "blocked", Cause: otel.BlockCause(reason).String(), Count: acc.stats.Blocked[reason]})
		}
	}
	for _, ow := range slices.Sorted(maps.Keys(owners)) {
		or := ownerReport{Owner: ow, reportStats: stats(owners[ow], o.target, "", ow, nil)}
		for _, a := range r.APIs {
			if a.Owner == ow {
				or.APIs = append(or.APIs, a.API)
			}
		}
		r.Owners = append(r.Owners, or)
	}
	slow := slices.Clone(r.APIs)
	slow = slices.DeleteFunc(slow, func(a apiReport) bool { return a.Calls == 0 })
	slices.SortStableFunc(slow, func(a, b apiReport) int { return cmp.Compare(b.P99, a.P99) })
	for _, a := range slow[:min(len(slow), o.top)] {
		r.Slowest = append(r.Slowest, slowAPI{API: a.API, Owner: a.Owner, P99: a.P99, P999: a.P999, Calls: a.Calls})
	}
	slices.SortStableFunc(r.Below, func(a, b windowReport) int {
		return cmp.Or(a.Start.Compare(b.Start), strings.Compare(a.API, b.API))
	})
	if r.Records == 0 {
		switch {
		case in.noStream:
			r.Note = "No SLA records: the stream jetway_sla does not exist yet (no edge has stored a minute)."
		default:
			r.Note = fmt.Sprintf("No SLA records between %s and %s%s.", o.from.Format(time.RFC3339), o.until.Format(time.RFC3339), filterSuffix(r.Filter))
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
func ensureSlices(r *slaReport) {
	if r.Owners == nil {
		r.Owners = []ownerReport{}
	}
	if r.APIs == nil {
		r.APIs = []apiReport{}
	}
	if r.Slowest == nil {
		r.Slowest = []slowAPI{}
	}
	if r.Below == nil {
		r.Below = []windowReport{}
	}
	if r.Errors == nil {
		r.Errors = []errorCount{}
	}
	if r.Breakers == nil {
		r.Breakers = []breakerEvent{}
	}
	if r.Switches == nil {
		r.Switches = []changeEvent{}
	}
	if r.Changes == nil {
		r.Changes = []changeEvent{}
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
func stats(a *apiAcc, target float64, api, owner string, below *[]windowReport) reportStats {
	s := a.stats
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	rs := reportStats{Calls: s.Calls(), Succeeded: s.Succeeded, GatewayFailed: s.Failures(otel.CauseGateway),
		BackendFailed: s.Failures(otel.CauseBackend), Refused: s.Failures(otel.CauseRefused),
		Availability: 100 * s.Availability(), P50: ms(s.Latency.Quantile(0.5)), P90: ms(s.Latency.Quantile(0.9)),
		P99: ms(s.Latency.Quantile(0.99)), P999: ms(s.Latency.Quantile(0.999)), BreakersOpened: a.breakers}
	for _, start := range slices.SortedFunc(maps.Keys(a.windows), time.Time.Compare) {
		c := a.windows[start]
		if c[1] == 0 {
			continue
		}
		rs.Windows++
		w := windowReport{Start: start, API: api, Owner: owner, Calls: c[1], Succeeded: c[0], Availability: 100 * float64(c[0]) / float64(c[1])}
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

// writeReport writes r in a format.
func writeReport(w io.Writer, r *slaReport, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "html":
		return reportHTML.Execute(w, r)
	}
	return reportMD.Execute(w, r)
}

var reportFuncs = template.FuncMap{
	"pct": func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) + " %" },
	"ms":  func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + " ms" },
	"t":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") },
	"ts":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"join": func(s []string) string {
		if len(s) == 0 {
			return "—"
		}
		return strings.Join(s, ", ")
	},
	// md escapes what would break a Markdown table cell.
	"md": func(s string) string {
		return strings.NewReplacer("|", `\|`, "\n", " ", "<", "&lt;", ">", "&gt;", "`", "\\`", "*", `\*`, "[", `\[`, "]", `\]`).Replace(s)
	},
}

// mdTemplate parses the Markdown report with text/template: html/template
// would escape it as HTML. The md func escapes what comes from records.
func mdTemplate(text string) *texttemplate.Template {
	return texttemplate.Must(texttemplate.New("md").Funcs(texttemplate.FuncMap(reportFuncs)).Parse(text))
}

var reportMD = mdTemplate(`# SLA report {{t .From}} — {{t .Until}}{{if .Filter}} ({{md .Filter}}){{end}}

{{.Rule}}. Target: {{pct .Target}} per window.
{{range .Notes}}
> {{md .}}
{{end}}{{if .Note}}
**{{md .Note}}**
{{else}}
Records: {{.Records}} API-minutes from {{.Nodes}} node(s).

## Summary

| calls | succeeded | gateway failures | backend failures | refused | availability | windows below target | worst window | p50 | p90 | p99 | p99.9 | breakers opened |
|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
{{with .Total}}| {{.Calls}} | {{.Succeeded}} | {{.GatewayFailed}} | {{.BackendFailed}} | {{.Refused}} | {{pct .Availability}} | {{.WindowsBelow}} of {{.Windows}} | {{with .WorstWindow}}{{pct .Availability}} at {{t .Start}}{{else}}—{{end}} | {{ms .P50}} | {{ms .P90}} | {{ms .P99}} | {{ms .P999}} | {{.BreakersOpened}} |{{end}}

## By owner

| owner | APIs | calls | availability | windows below target | worst window | p99 | breakers opened |
|---|---|---:|---:|---:|---:|---:|---:|
{{range .Owners}}| {{md .Owner}} | {{md (join .APIs)}} | {{.Calls}} | {{pct .Availability}} | {{.WindowsBelow}} of {{.Windows}} | {{with .WorstWindow}}{{pct .Availability}} at {{t .Start}}{{else}}—{{end}} | {{ms .P99}} | {{.BreakersOpened}} |
{{end}}
## By API

| API | owner | calls | succeeded | gateway failures | backend failures | refused | availability | windows below target | p50 | p90 | p99 | p99.9 | breakers opened | changed on |
|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|
{{range .APIs}}| {{md .API}} | {{md .Owner}} | {{.Calls}} | {{.Succeeded}} | {{.GatewayFailed}} | {{.BackendFailed}} | {{.Refused}} | {{pct .Availability}} | {{.WindowsBelow}} of {{.Windows}} | {{ms .P50}} | {{ms .P90}} | {{ms .P99}} | {{ms .P999}} | {{.BreakersOpened}} | {{join .Changed}} |
{{end}}
## Slowest APIs (p99 over the period)

| API | owner | p99 | p99.9 | calls |
|---|---|---:|---:|---:|
{{range .Slowest}}| {{md .API}} | {{md .Owner}} | {{ms .P99}} | {{ms .P999}} | {{.Calls}} |
{{end}}
## Windows below {{pct .Target}}

{{if .Below}}| window (5 min) | API | owner | calls counted | succeeded | availability |
|---|---|---|---:|---:|---:|
{{range .Below}}| {{t .Start}} | {{md .API}} | {{md .Owner}} | {{.Calls}} | {{.Succeeded}} | {{pct .Availability}} |
{{end}}{{else}}None.
{{end}}
## Errors by code

{{if .Errors}}| API | code | kind | whose | calls |
|---|---|---|---|---:|
{{range .Errors}}| {{md .API}} | {{md .Code}} | {{.Kind}} | {{.Cause}} | {{.Count}} |
{{end}}{{else}}None.
{{end}}{{end}}
## Breakers opened

{{if .Breakers}}| at | API | owner | worker | reason |
|---|---|---|---|---|
{{range .Breakers}}| {{ts .At}} | {{md .API}} | {{md .Owner}} | {{md .Worker}} | {{md .Reason}} |
{{end}}{{else}}None.
{{end}}
## Switches flipped

{{if .Switches}}| at | switch | on/off | API | owner | by |
|---|---|---|---|---|---|
{{range .Switches}}| {{ts .At}} | {{.Kind}} | {{.Action}} | {{md .API}} | {{md .Owner}} | {{md .Actor}} |
{{end}}{{else}}None.
{{end}}
## Registry changes

{{if .Changes}}| at | action | API | owner | by |
|---|---|---|---|---|
{{range .Changes}}| {{ts .At}} | {{.Action}} | {{md .API}} | {{md .Owner}} | {{md .Actor}} |
{{end}}{{else}}None.
{{end}}`)

var reportHTML = template.Must(template.New("html").Funcs(reportFuncs).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>SLA report {{t .From}} — {{t .Until}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
th{background:#f3f3f3}
.bad{color:#b00020;font-weight:600}
.note{padding:.6em 1em;background:#fff4e5;border-left:4px solid #f0a000}
</style></head><body>
<h1>SLA report {{t .From}} — {{t .Until}}{{if .Filter}} ({{.Filter}}){{end}}</h1>
<p>{{.Rule}}. Target: {{pct .Target}} per window.</p>
{{range .Notes}}<p class="note">{{.}}</p>{{end}}
{{if .Note}}<p class="note"><strong>{{.Note}}</strong></p>{{else}}
<p>Records: {{.Records}} API-minutes from {{.Nodes}} node(s).</p>
<h2>Summary</h2>
<table><tr><th>calls</th><th>succeeded</th><th>gateway failures</th><th>backend failures</th><th>refused</th><th>availability</th><th>windows below target</th><th>worst window</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>breakers opened</th></tr>
{{with .Total}}<tr><td class="n">{{.Calls}}</td><td class="n">{{.Succeeded}}</td><td class="n">{{.GatewayFailed}}</td><td class="n">{{.BackendFailed}}</td><td class="n">{{.Refused}}</td><td class="n">{{pct .Availability}}</td><td class="n">{{.WindowsBelow}} of {{.Windows}}</td><td>{{with .WorstWindow}}{{pct .Availability}} at {{t .Start}}{{else}}—{{end}}</td><td class="n">{{ms .P50}}</td><td class="n">{{ms .P90}}</td><td class="n">{{ms .P99}}</td><td class="n">{{ms .P999}}</td><td class="n">{{.BreakersOpened}}</td></tr>{{end}}
</table>
<h2>By owner</h2>
<table><tr><th>owner</th><th>APIs</th><th>calls</th><th>availability</th><th>windows below target</th><th>worst window</th><th>p99</th><th>breakers opened</th></tr>
{{range .Owners}}<tr><td>{{.Owner}}</td><td>{{join .APIs}}</td><td class="n">{{.Calls}}</td><td class="n{{if .WindowsBelow}} bad{{end}}">{{pct .Availability}}</td><td class="n">{{.WindowsBelow}} of {{.Windows}}</td><td>{{with .WorstWindow}}{{pct .Availability}} at {{t .Start}}{{else}}—{{end}}</td><td class="n">{{ms .P99}}</td><td class="n">{{.BreakersOpened}}</td></tr>
{{end}}</table>
<h2>By API</h2>
<table><tr><th>API</th><th>owner</th><th>calls</th><th>succeeded</th><th>gateway failures</th><th>backend failures</th><th>refused</th><th>availability</th><th>windows below target</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>breakers opened</th><th>changed on</th></tr>
{{range .APIs}}<tr><td>{{.API}}</td><td>{{.Owner}}</td><td class="n">{{.Calls}}</td><td class="n">{{.Succeeded}}</td><td class="n">{{.GatewayFailed}}</td><td class="n">{{.BackendFailed}}</td><td class="n">{{.Refused}}</td><td class="n{{if .WindowsBelow}} bad{{end}}">{{pct .Availability}}</td><td class="n">{{.WindowsBelow}} of {{.Windows}}</td><td class="n">{{ms .P50}}</td><td class="n">{{ms .P90}}</td><td class="n">{{ms .P99}}</td><td class="n">{{ms .P999}}</td><td class="n">{{.BreakersOpened}}</td><td>{{join .Changed}}</td></tr>
{{end}}</table>
<h2>Slowest APIs (p99 over the period)</h2>
<table><tr><th>API</th><th>owner</th><th>p99</th><th>p99.9</th><th>calls</th></tr>
{{range .Slowest}}<tr><td>{{.API}}</td><td>{{.Owner}}</td><td class="n">{{ms .P99}}</td><td class="n">{{ms .P999}}</td><td class="n">{{.Calls}}</td></tr>
{{end}}</table>
<h2>Windows below {{pct .Target}}</h2>
{{if .Below}}<table><tr><th>window (5 min)</th><th>API</th><th>owner</th><th>calls counted</th><th>succeeded</th><th>availability</th></tr>
{{range .Below}}<tr><td>{{t .Start}}</td><td>{{.API}}</td><td>{{.Owner}}</td><td class="n">{{.Calls}}</td><td class="n">{{.Succeeded}}</td><td class="n bad">{{pct .Availability}}</td></tr>
{{end}}</table>{{else}}<p>None.</p>{{end}}
<h2>Errors by code</h2>
{{if .Errors}}<table><tr><th>API</th><th>code</th><th>kind</th><th>whose</th><th>calls</th></tr>
{{range .Errors}}<tr><td>{{.API}}</td><td>{{.Code}}</td><td>{{.Kind}}</td><td>{{.Cause}}</td><td class="n">{{.Count}}</td></tr>
{{end}}</table>{{else}}<p>None.</p>{{end}}
{{end}}
<h2>Breakers opened</h2>
{{if .Breakers}}<table><tr><th>at</th><th>API</th><th>owner</th><th>worker</th><th>reason</th></tr>
{{range .Breakers}}<tr><td>{{ts .At}}</td><td>{{.API}}</td><td>{{.Owner}}</td><td>{{.Worker}}</td><td>{{.Reason}}</td></tr>
{{end}}</table>{{else}}<p>None.</p>{{end}}
<h2>Switches flipped</h2>
{{if .Switches}}<table><tr><th>at</th><th>switch</th><th>on/off</th><th>API</th><th>owner</th><th>by</th></tr>
{{range .Switches}}<tr><td>{{ts .At}}</td><td>{{.Kind}}</td><td>{{.Action}}</td><td>{{.API}}</td><td>{{.Owner}}</td><td>{{.Actor}}</td></tr>
{{end}}</table>{{else}}<p>None.</p>{{end}}
<h2>Registry changes</h2>
{{if .Changes}}<table><tr><th>at</th><th>action</th><th>API</th><th>owner</th><th>by</th></tr>
{{range .Changes}}<tr><td>{{ts .At}}</td><td>{{.Action}}</td><td>{{.API}}</td><td>{{.Owner}}</td><td>{{.Actor}}</td></tr>
{{end}}</table>{{else}}<p>None.</p>{{end}}
<p><small>Generated {{ts .Generated}} by jetway report.</small></p>
</body></html>
`))
