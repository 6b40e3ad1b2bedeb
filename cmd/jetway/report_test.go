package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/otel"
)

// latencies is a histogram of n calls of d each.
func latencies(n int, d time.Duration) otel.Latency {
	var l otel.Latency
	for range n {
		l.Add(d)
	}
	return l
}

// jetway report on known records of two nodes: the figures per API and
// owner, a window below target, the backend's failures left out, a
// breaker opening heard by both edges counted once (and a forged one on
// another pool's subject dropped), the switches and registry changes from
// the audit trail, each format; filters; bad input and empty periods.
func TestReportCommand(t *testing.T) {
	s := natstest.RunServer(t)
	url := s.ClientURL()
	jw := func(stdin string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(append(args, "--nats", url), strings.NewReader(stdin), &out, &errb)
		return code, out.String(), errb.String()
	}
	// No stream yet: a report that says so.
	if code, out, errs := jw("", "report"); code != 0 || !strings.Contains(out, "jetway_sla does not exist yet") {
		t.Fatalf("no stream: %d %s %s", code, out, errs)
	}
	for _, e := range []string{
		`{"name":"orders.get","pool":"orders","route":{"path":"/orders"},"backend":{"type":"mock"}}`,
		`{"name":"users.get","pool":"users","route":{"path":"/users"},"backend":{"type":"mock"}}`,
	} {
		if code, out, errs := jw(e, "api", "put", "-"); code != 0 {
			t.Fatalf("api put: %d %s %s", code, out, errs)
		}
	}
	for _, args := range [][]string{{"degrade", "on", "orders.get"}, {"degrade", "off", "orders.get"}} {
		if code, out, errs := jw("", args...); code != 0 {
			t.Fatalf("%v: %d %s %s", args, code, out, errs)
		}
	}
	nc := natstest.Connect(t, s)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Owners: an entry's owner field (an owner with markup, to check the
	// escaping); users.get has none.
	kv, err := js.KeyValue(ctx, bus.BucketAPIs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "orders.get", []byte(`{"name":"orders.get","pool":"orders","owner":"team-<b>a</b>","route":{"path":"/orders"},"backend":{"type":"mock"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := otel.EnsureSLAStream(ctx, js, otel.SLAStreamOptions{}); err != nil {
		t.Fatal(err)
	}
	w0 := time.Now().UTC().Truncate(otel.SLAWindow).Add(-30 * time.Minute)
	opened := otel.BreakerOpened{API: "orders.get", PoolToken: "orders", Worker: "w1", Gen: 1, At: w0.Add(30 * time.Second), Reason: "5 failures"}
	forged := otel.BreakerOpened{API: "orders.get", PoolToken: "evil", Worker: "w9", Gen: 7, At: w0.Add(40 * time.Second)}
	minutes := []otel.SLAMinute{
		{Node: "n1", Boot: "b1", Minute: w0, Breakers: []otel.BreakerOpened{opened, forged}, APIs: []otel.SLAAPI{{API: "orders.get", Pool: "orders", SLAStats: otel.SLAStats{
			Succeeded: 999, Failed: map[string]int64{"GATEWAY_TIMEOUT": 1, "BACKEND_5XX": 50}, Blocked: map[string]int64{"RATE_LIMITED": 10},
			Latency: latencies(1060, 10*time.Millisecond)}}}},
		{Node: "n2", Boot: "b2", Minute: w0.Add(time.Minute), Breakers: []otel.BreakerOpened{opened}, APIs: []otel.SLAAPI{
			{API: "orders.get", Pool: "orders", SLAStats: otel.SLAStats{Succeeded: 1000, Latency: latencies(1000, 10*time.Millisecond)}},
			{API: "users.get", Pool: "users", SLAStats: otel.SLAStats{Succeeded: 100, Latency: latencies(100, 200*time.Millisecond)}},
		}},
		{Node: "n1", Boot: "b1", Minute: w0.Add(5 * time.Minute), APIs: []otel.SLAAPI{{API: "orders.get", Pool: "orders", SLAStats: otel.SLAStats{
			Succeeded: 500, Failed: map[string]int64{"BAD_GATEWAY": 5}, Blocked: map[string]int64{"CIRCUIT_OPEN": 5},
			Latency: latencies(510, 20*time.Millisecond)}}}},
		// Outside the period asked for below.
		{Node: "n1", Boot: "b0", Minute: w0.Add(-3 * time.Hour), APIs: []otel.SLAAPI{{API: "orders.get", SLAStats: otel.SLAStats{Succeeded: 7}}}},
	}
	for _, m := range minutes {
		b, _ := json.Marshal(m)
		if _, err := js.Publish(ctx, otel.SLASubjectPrefix+m.Node, b); err != nil {
			t.Fatal(err)
		}
	}

	code, out, errs := jw("", "report", "--since", "2h", "--format", "json")
	if code != 0 {
		t.Fatalf("json: %d %s %s", code, out, errs)
	}
	var r slaReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r.Nodes != 2 || r.Records != 4 || r.Note != "" {
		t.Errorf("nodes %d, records %d, note %q", r.Nodes, r.Records, r.Note)
	}
	tot := r.Total
	if tot.Calls != 2670 || tot.Succeeded != 2599 || tot.GatewayFailed != 1 || tot.BackendFailed != 60 || tot.Refused != 10 {
		t.Errorf("total %+v", tot)
	}
	if want := 100 * 2599.0 / 2600; math.Abs(tot.Availability-want) > 1e-9 {
		t.Errorf("availability %v, want %v", tot.Availability, want)
	}
	if tot.Windows != 2 || tot.WindowsBelow != 1 || tot.WorstWindow == nil || !tot.WorstWindow.Start.Equal(w0) || tot.BreakersOpened != 1 {
		t.Errorf("windows %+v", tot)
	}
	if len(r.APIs) != 2 || r.APIs[0].API != "orders.get" || r.APIs[0].Owner != "team-<b>a</b>" || r.APIs[1].Owner != "unowned" {
		t.Fatalf("apis %+v", r.APIs)
	}
	if o := r.APIs[0]; o.Calls != 2570 || o.WindowsBelow != 1 || o.BreakersOpened != 1 || o.P99 < 19.8 || o.P99 > 20.2 || o.P50 < 9.9 || o.P50 > 10.1 {
		t.Errorf("orders.get %+v", o)
	}
	if len(r.APIs[0].Changed) != 1 || len(r.Changes) != 2 {
		t.Errorf("registry changes %+v, changed on %v", r.Changes, r.APIs[0].Changed)
	}
	if len(r.Below) != 1 || r.Below[0].API != "orders.get" || r.Below[0].Calls != 2000 || r.Below[0].Succeeded != 1999 {
		t.Errorf("windows below %+v", r.Below)
	}
	if len(r.Slowest) != 2 || r.Slowest[0].API != "users.get" || r.Slowest[0].P99 < 198 || r.Slowest[0].P99 > 202 {
		t.Errorf("slowest %+v", r.Slowest)
	}
	if len(r.Breakers) != 1 || r.Breakers[0].Worker != "w1" {
		t.Errorf("breakers %+v", r.Breakers)
	}
	if len(r.Switches) != 2 || r.Switches[0].Action != "on" || r.Switches[1].Action != "off" || r.Switches[0].Kind != "degrade" {
		t.Errorf("switches %+v", r.Switches)
	}
	if len(r.Owners) != 2 || r.Owners[0].Owner != "team-<b>a</b>" || r.Owners[1].Owner != "unowned" || r.Owners[1].Availability != 100 {
		t.Errorf("owners %+v", r.Owners)
	}
	causes := map[string]string{}
	for _, e := range r.Errors {
		causes[e.Code] = e.Cause
	}
	if causes["GATEWAY_TIMEOUT"] != "gateway" || causes["BACKEND_5XX"] != "backend" || causes["CIRCUIT_OPEN"] != "backend" || causes["RATE_LIMITED"] != "refused" {
		t.Errorf("errors %+v", r.Errors)
	}

	code, out, errs = jw("", "report", "--since", "2h")
	if code != 0 {
		t.Fatalf("md: %d %s %s", code, out, errs)
	}
	for _, want := range []string{"# SLA report", "| orders.get | team-&lt;b&gt;a&lt;/b&gt; | 2570 | 2499 | 1 | 60 | 10 | 99.960 % | 1 of 2 |",
		"## Windows below 99.990 %", "| 2000 | 1999 | 99.950 % |", "| users.get | unowned | 200.", "| degrade | on | orders.get |"} {
		if !strings.Contains(out, want) {
			t.Errorf("md lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = jw("", "report", "--since", "2h", "--format", "html")
	if code != 0 || !strings.HasPrefix(out, "<!DOCTYPE html>") || !strings.Contains(out, "team-&lt;b&gt;a&lt;/b&gt;") || strings.Contains(out, "<b>a</b>") ||
		!strings.Contains(out, "99.950 %") || !strings.HasSuffix(strings.TrimSpace(out), "</html>") {
		t.Errorf("html: %d %s", code, out)
	}
	// Filters.
	code, out, _ = jw("", "report", "--since", "2h", "--format", "json", "--api", "users.get")
	r = slaReport{}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || len(r.APIs) != 1 || r.Total.Calls != 100 || len(r.Switches) != 0 || len(r.Breakers) != 0 {
		t.Errorf("--api: %d %+v", code, r)
	}
	code, out, _ = jw("", "report", "--since", "2h", "--format", "json", "--owner", "team-<b>a</b>")
	r = slaReport{}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || len(r.APIs) != 1 || r.APIs[0].API != "orders.get" || len(r.Switches) != 2 {
		t.Errorf("--owner: %d %+v", code, r)
	}
	// An empty period, and a filter that matches nothing: said plainly.
	if code, out, _ := jw("", "report", "--since", "10d", "--until", "9d"); code != 0 || !strings.Contains(out, "No SLA records between") {
		t.Errorf("empty period: %d %s", code, out)
	}
	if code, out, _ := jw("", "report", "--since", "2h", "--api", "nope", "--format", "html"); code != 0 || !strings.Contains(out, "No SLA records between") || !strings.Contains(out, "for api nope") {
		t.Errorf("no such api: %d %s", code, out)
	}
	// Bad input: usage errors.
	for _, args := range [][]string{
		{"report", "--since", "yesterday-ish"},
		{"report", "--since", "-5h"},
		{"report", "--until", "garbage"},
		{"report", "--since", "1h", "--until", "2h"},
		{"report", "--format", "pdf"},
		{"report", "--target", "120"},
		{"report", "extra"},
	} {
		if code, out, errs := jw("", args...); code != 2 {
			t.Errorf("%v: exit %d, want 2: %s %s", args, code, out, errs)
		}
	}
}

func TestParseWhen(t *testing.T) {
	now := time.Date(2030, 6, 15, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"24h":                  now.Add(-24 * time.Hour),
		"7d":                   now.Add(-7 * 24 * time.Hour),
		"90m":                  now.Add(-90 * time.Minute),
		"2030-06-01":           time.Date(2030, 6, 1, 0, 0, 0, 0, time.UTC),
		"2030-06-01T10:00:00Z": time.Date(2030, 6, 1, 10, 0, 0, 0, time.UTC),
	} {
		if got, err := parseWhen(in, now); err != nil || !got.Equal(want) {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "0s", "-1h", "tomorrow", "2030-13-01"} {
		if _, err := parseWhen(in, now); err == nil {
			t.Errorf("%q parsed", in)
		}
	}
}
