package admin_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/admin"
	"github.com/jetway-gw/jetway/otel"
	"github.com/jetway-gw/jetway/registry"
)

// GET /v1/reports: the CLI's report over REST, for a viewer; the CLI's
// usage errors as 400 naming the parameter; the HTML page escaped and
// served with a policy that runs no script.
func TestReports(t *testing.T) {
	e := start(t)
	viewer := e.token("viewer")
	if r := e.do("", "GET", "/v1/reports", ""); r.status != 401 {
		t.Errorf("no token: %d", r.status)
	}
	// No stream yet: a report that says so.
	if r := e.do(viewer, "GET", "/v1/reports", ""); r.status != 200 || !strings.Contains(r.body, "jetway_sla does not exist yet") {
		t.Fatalf("no stream: %d %s", r.status, r.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.c.Put(ctx, []byte(`{"name":"orders.get","pool":"orders","owner":"team-<b>a</b>","description":"<script>alert(1)</script>","route":{"path":"/orders"},"backend":{"type":"mock"}}`)); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(e.nc)
	if _, err := otel.EnsureSLAStream(ctx, js, otel.SLAStreamOptions{}); err != nil {
		t.Fatal(err)
	}
	m := otel.SLAMinute{Node: "n1", Boot: "b1", Minute: time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute),
		APIs: []otel.SLAAPI{{API: "orders.get", Pool: "orders", SLAStats: otel.SLAStats{Succeeded: 99, Failed: map[string]int64{"GATEWAY_TIMEOUT": 1}}}}}
	b, _ := json.Marshal(m)
	if _, err := js.Publish(ctx, otel.SLASubjectPrefix+m.Node, b); err != nil {
		t.Fatal(err)
	}

	r := e.do(viewer, "GET", "/v1/reports?since=1h&owner="+url.QueryEscape("team-<b>a</b>"), "")
	var rep struct {
		Total struct{ Calls, Succeeded int64 }
		APIs  []struct{ API, Owner string } `json:"apis"`
	}
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" || json.Unmarshal([]byte(r.body), &rep) != nil ||
		rep.Total.Calls != 100 || len(rep.APIs) != 1 || rep.APIs[0].Owner != "team-<b>a</b>" {
		t.Fatalf("json: %d %s", r.status, r.body)
	}
	h := e.do(viewer, "GET", "/v1/reports?since=1h&format=html", "")
	csp := h.header.Get("Content-Security-Policy")
	if h.status != 200 || !strings.HasPrefix(h.header.Get("Content-Type"), "text/html") || h.header.Get("X-Content-Type-Options") != "nosniff" ||
		!strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") || !strings.Contains(csp, "style-src 'sha256-") {
		t.Errorf("html headers: %d %v", h.status, h.header)
	}
	if !strings.Contains(h.body, "team-&lt;b&gt;a&lt;/b&gt;") || strings.Contains(h.body, "<b>a</b>") || strings.Contains(h.body, "<script") {
		t.Errorf("html not escaped:\n%s", h.body)
	}
	if md := e.do(viewer, "GET", "/v1/reports?since=1h&format=md", ""); md.status != 200 || !strings.HasPrefix(md.header.Get("Content-Type"), "text/markdown") ||
		!strings.HasPrefix(md.body, "# SLA report") {
		t.Errorf("md: %d %v %s", md.status, md.header, md.body)
	}
	for q, param := range map[string]string{
		"since=yesterday-ish": "since", "since=-5h": "since", "until=garbage": "until", "since=1h&until=2h": "since",
		"format=pdf": "format", "target=120": "target", "target=x": "target", "top=-1": "top", "top=1.5": "top",
	} {
		r := e.do(viewer, "GET", "/v1/reports?"+q, "")
		if r.status != 400 || r.err.Code != "BAD_REQUEST" || len(r.err.Problems) != 1 || r.err.Problems[0].Path != param {
			t.Errorf("%s: %d %s", q, r.status, r.body)
		}
	}
}

// The report schedules over REST: listed for a viewer with no webhook's
// path or query, written and deleted by an admin at their revision.
func TestReportSchedules(t *testing.T) {
	e := start(t)
	viewer, adm := e.token("viewer"), e.token("admin")
	owner := "Team Payments/EU"
	path := "/v1/reports/schedules/" + url.PathEscape(owner)
	secret := "https://hooks.example.com/T0/s3cr3t-path?key=k3y"
	doc := `{"owner":"Team Payments/EU","every":"daily","at":"06:30","webhook":{"url":"` + secret + `"}}`
	if r := e.do(viewer, "PUT", path, doc, "If-None-Match", "*"); r.status != 403 {
		t.Errorf("viewer's put: %d %s", r.status, r.body)
	}
	if r := e.do(adm, "PUT", path, doc); r.status != 428 {
		t.Errorf("put without If-Match: %d %s", r.status, r.body)
	}
	if r := e.do(adm, "PUT", "/v1/reports/schedules/other", doc, "If-None-Match", "*"); r.status != 400 || r.err.Code != "INVALID_ENTRY" {
		t.Errorf("owner not the path's: %d %s", r.status, r.body)
	}
	if r := e.do(adm, "PUT", path, `{"owner":"Team Payments/EU","every":"hourly"}`, "If-None-Match", "*"); r.status != 400 || r.err.Code != "INVALID_ENTRY" {
		t.Errorf("invalid schedule: %d %s", r.status, r.body)
	}
	made := e.do(adm, "PUT", path, doc, "If-None-Match", "*")
	if made.status != 200 || made.header.Get("ETag") == "" || strings.Contains(made.body, "s3cr3t") || strings.Contains(made.body, "k3y") {
		t.Fatalf("create: %d %s", made.status, made.body)
	}
	if r := e.do(adm, "PUT", path, doc, "If-None-Match", "*"); r.status != 409 {
		t.Errorf("a second create: %d %s", r.status, r.body)
	}
	list := e.do(viewer, "GET", "/v1/reports/schedules", "")
	var ls struct {
		Items []struct {
			Owner    string
			Revision uint64
			Schedule registry.ReportSchedule
		}
	}
	if list.status != 200 || json.Unmarshal([]byte(list.body), &ls) != nil || len(ls.Items) != 1 || ls.Items[0].Owner != owner ||
		ls.Items[0].Schedule.Webhook == nil || ls.Items[0].Schedule.Webhook.URL != "https://hooks.example.com/…" ||
		strings.Contains(list.body, "s3cr3t") || strings.Contains(list.body, "k3y") {
		t.Fatalf("list: %d %s", list.status, list.body)
	}
	// An edit as the list shows it (the URL redacted) keeps the stored URL.
	edited := strings.Replace(strings.Replace(doc, secret, "https://hooks.example.com/…", 1), "06:30", "07:45", 1)
	changed := e.do(adm, "PUT", path, edited, "If-Match", made.header.Get("ETag"))
	if changed.status != 200 {
		t.Fatalf("edit: %d %s", changed.status, changed.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, _ := jetstream.New(e.nc)
	st, err := registry.OpenReports(ctx, js, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := st.Get(ctx, owner); err != nil || got.At != "07:45" || got.Webhook.URL != secret {
		t.Errorf("stored: %+v %v", got, err)
	}
	// Stale revisions: 412 with the one that won, nothing written.
	if r := e.do(adm, "PUT", path, doc, "If-Match", made.header.Get("ETag")); r.status != 412 || r.err.Code != "REVISION_CONFLICT" || etagOf(r.err.Revision) != changed.header.Get("ETag") {
		t.Errorf("stale put: %d %s", r.status, r.body)
	}
	if r := e.do(adm, "DELETE", path, "", "If-Match", made.header.Get("ETag")); r.status != 412 {
		t.Errorf("stale delete: %d %s", r.status, r.body)
	}
	if r := e.do(viewer, "DELETE", path, "", "If-Match", changed.header.Get("ETag")); r.status != 403 {
		t.Errorf("viewer's delete: %d %s", r.status, r.body)
	}
	if r := e.do(adm, "DELETE", path, ""); r.status != 428 {
		t.Errorf("delete without If-Match: %d %s", r.status, r.body)
	}
	if r := e.do(adm, "DELETE", path, "", "If-Match", changed.header.Get("ETag")); r.status != 204 {
		t.Errorf("delete: %d %s", r.status, r.body)
	}
	if r := e.do(adm, "DELETE", path, "", "If-Match", changed.header.Get("ETag")); r.status != 404 {
		t.Errorf("delete again: %d %s", r.status, r.body)
	}
	// Created again after a delete (If-None-Match: *).
	if r := e.do(adm, "PUT", path, doc, "If-None-Match", "*"); r.status != 200 {
		t.Errorf("create after delete: %d %s", r.status, r.body)
	}
	// Every write is in the audit trail (kind report), naming the token;
	// the refused ones are not.
	trail, err := e.c.Audit(ctx, time.Time{}, "report", 0)
	var got []string
	for _, ch := range trail {
		if ch.Key != owner || !strings.HasPrefix(ch.Actor, "token:") {
			t.Errorf("record %+v", ch)
		}
		got = append(got, ch.Action)
	}
	if err != nil || strings.Join(got, ",") != "put,put,delete,put" {
		t.Errorf("audit trail: %v %q", err, got)
	}
	if r := e.do(viewer, "GET", "/v1/audit?kind=report", ""); r.status != 200 || !strings.Contains(r.body, `"kind":"report"`) {
		t.Errorf("audit over REST: %d %s", r.status, r.body)
	}
}

// An alert rule's webhook is listed redacted for every role (its path or
// query may be its key), as the report schedules'; a PUT that gives the
// redacted URL back keeps the stored one, and one that swaps the host (or
// the scheme) under the redacted path, or gives a redacted URL with
// nothing to keep, is refused and writes nothing.
func TestAlertWebhookRedacted(t *testing.T) {
	e := start(t)
	viewer, op, adm := e.token("viewer"), e.token("operator"), e.token("admin")
	secret := "https://ops:pw@hooks.example.com/T0/s3cr3t?key=k3y"
	rule := `{"name":"slow","kind":"p99_above","api":"*","latency":"500ms","webhook":"` + secret + `"}`
	put := e.do(adm, "PUT", "/v1/alerts/slow", rule, "If-None-Match", "*")
	if put.status != 200 || strings.Contains(put.body, "s3cr3t") || strings.Contains(put.body, "k3y") || strings.Contains(put.body, "pw@") {
		t.Fatalf("put: %d %s", put.status, put.body)
	}
	for _, tok := range []string{viewer, op, adm} {
		r := e.do(tok, "GET", "/v1/alerts", "")
		if r.status != 200 || !strings.Contains(r.body, `"webhook":"https://hooks.example.com/…"`) ||
			strings.Contains(r.body, "s3cr3t") || strings.Contains(r.body, "k3y") || strings.Contains(r.body, "pw@") {
			t.Errorf("list: %d %s", r.status, r.body)
		}
	}
	stored := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		all, err := e.c.ListAlerts(ctx)
		if err != nil || len(all) != 1 || all[0].Value == nil {
			t.Fatalf("stored: %v %+v", err, all)
		}
		return all[0].Value.Webhook
	}
	etag := put.header.Get("ETag")
	for _, bad := range []string{"https://evil.example/…", "http://hooks.example.com/…", "https://hooks.example.com:8443/…", "(the webhook url)"} {
		doc := strings.Replace(strings.Replace(rule, secret, bad, 1), "500ms", "900ms", 1)
		if r := e.do(adm, "PUT", "/v1/alerts/slow", doc, "If-Match", etag); r.status != 400 || r.err.Code != "INVALID_ENTRY" {
			t.Errorf("%s: %d %s", bad, r.status, r.body)
		}
		if got := stored(); got != secret {
			t.Fatalf("%s: stored %q", bad, got)
		}
	}
	edited := strings.Replace(strings.Replace(rule, secret, "https://hooks.example.com/…", 1), "500ms", "900ms", 1)
	if r := e.do(adm, "PUT", "/v1/alerts/slow", edited, "If-Match", etag); r.status != 200 || strings.Contains(r.body, "s3cr3t") {
		t.Fatalf("edit as listed: %d %s", r.status, r.body)
	}
	if got := stored(); got != secret {
		t.Errorf("the edit lost the webhook: %q", got)
	}
	// A redacted URL for a rule that has none to keep.
	other := `{"name":"other","kind":"p99_above","api":"*","latency":"500ms","webhook":"https://hooks.example.com/…"}`
	if r := e.do(adm, "PUT", "/v1/alerts/other", other, "If-None-Match", "*"); r.status != 400 {
		t.Errorf("redacted with nothing kept: %d %s", r.status, r.body)
	}
}

// A schedule's PUT with a redacted URL keeps the stored one only at the
// same scheme and host: a host swapped in under the secret path, or a
// redacted URL with no stored one, is refused.
func TestScheduleRedactedURLNotSwapped(t *testing.T) {
	e := start(t)
	adm := e.token("admin")
	path := "/v1/reports/schedules/ops"
	secret := "https://hooks.example.com/T0/s3cr3t?key=k3y"
	doc := `{"owner":"ops","every":"daily","webhook":{"url":"` + secret + `"}}`
	if r := e.do(adm, "PUT", path, strings.Replace(doc, secret, "https://hooks.example.com/…", 1), "If-None-Match", "*"); r.status != 400 {
		t.Errorf("redacted with nothing kept: %d %s", r.status, r.body)
	}
	made := e.do(adm, "PUT", path, doc, "If-None-Match", "*")
	if made.status != 200 {
		t.Fatalf("create: %d %s", made.status, made.body)
	}
	for _, bad := range []string{"https://evil.example/…", "http://hooks.example.com/…"} {
		if r := e.do(adm, "PUT", path, strings.Replace(doc, secret, bad, 1), "If-Match", made.header.Get("ETag")); r.status != 400 || !strings.Contains(r.body, "webhook.url") {
			t.Errorf("%s: %d %s", bad, r.status, r.body)
		}
	}
}

// Reports are built two at a time, one at a time per token, and viewers
// share one of the two: no viewer token, nor all of them, keeps an
// operator or an admin from a report.
func TestReportSlots(t *testing.T) {
	s := admin.New(admin.Options{})
	v1, ok := s.ReportSlot("token:v/1", registry.RoleViewer)
	if !ok {
		t.Fatal("a first viewer's report refused")
	}
	if _, ok := s.ReportSlot("token:v/1", registry.RoleViewer); ok {
		t.Error("a viewer's second report at once")
	}
	if _, ok := s.ReportSlot("token:v/2", registry.RoleViewer); ok {
		t.Error("another viewer's report while one builds (viewers share one)")
	}
	op, ok := s.ReportSlot("token:o/1", registry.RoleOperator)
	if !ok {
		t.Fatal("an operator kept from a report by a viewer")
	}
	if _, ok := s.ReportSlot("token:a/1", registry.RoleAdmin); ok {
		t.Error("a third report at once")
	}
	if _, ok := s.ReportSlot("token:o/1", registry.RoleOperator); ok {
		t.Error("an operator's second report at once")
	}
	v1()
	v2, ok := s.ReportSlot("token:v/2", registry.RoleViewer)
	if !ok {
		t.Error("the viewers' slot not given back")
	}
	op()
	if a, ok := s.ReportSlot("token:a/1", registry.RoleAdmin); !ok {
		t.Error("the operator's slot not given back")
	} else {
		a()
	}
	v2()
}

// A period whose SLA records are estimated past the bound is refused
// before they are read (400 naming since), not built in memory.
func TestReportBoundedRead(t *testing.T) {
	e := start(t)
	viewer := e.token("viewer")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, _ := jetstream.New(e.nc)
	if _, err := otel.EnsureSLAStream(ctx, js, otel.SLAStreamOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		m := otel.SLAMinute{Node: "n1", Boot: "b1", Minute: time.Now().UTC().Truncate(time.Minute).Add(-time.Duration(30-i) * time.Minute),
			APIs: []otel.SLAAPI{{API: "orders.get", Pool: "orders", SLAStats: otel.SLAStats{Succeeded: 99}}}}
		b, _ := json.Marshal(m)
		if _, err := js.Publish(ctx, otel.SLASubjectPrefix+m.Node, b); err != nil {
			t.Fatal(err)
		}
	}
	if r := e.do(viewer, "GET", "/v1/reports?since=1h", ""); r.status != 200 {
		t.Fatalf("under the bound: %d %s", r.status, r.body)
	}
	defer admin.SetMaxReportBytes(1000)()
	if r := e.do(viewer, "GET", "/v1/reports?since=1h", ""); r.status != 400 || len(r.err.Problems) != 1 || r.err.Problems[0].Path != "since" || !strings.Contains(r.body, "jetway report") {
		t.Errorf("past the bound: %d %s", r.status, r.body)
	}
	// A period after the records were stored reads none: built.
	time.Sleep(1200 * time.Millisecond)
	if r := e.do(viewer, "GET", "/v1/reports?since=1s", ""); r.status != 200 {
		t.Errorf("a period with no records: %d %s", r.status, r.body)
	}
}
