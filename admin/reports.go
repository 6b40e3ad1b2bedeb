package admin

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/report"
)

// SLA reports (docs/reports.md): GET /v1/reports builds one as `jetway
// report` does — the same query, the same figures, the same pages — and
// /v1/reports/schedules are the owners' deliveries (`jetway report
// schedule`), each at its revision, with no webhook's path or query (they
// may hold a key) in any answer.

// reportTimeout bounds the building of one report (35 days of records
// are read): the CLI's own default.
var reportTimeout = 30 * time.Second

// maxReports is how many reports are built at once; another is 429.
// Viewers share one of them (viewerReports) and each token builds one at
// a time, so no viewer token, nor all of them together, can keep an
// operator or an admin from a report by asking for long ones in a loop.
const (
	maxReports       = 2
	maxViewerReports = 1
)

// maxReportBytes bounds the SLA records one report over REST may read
// (the stream keeps up to 8 GiB, and every record read is held until the
// report is built): a period estimated to hold more is refused before
// anything is read, naming the CLI, which runs in its own process. A var
// for the tests (export_test.go).
var maxReportBytes int64 = 256 << 20

// reportSlot takes the request's slots for building a report: the
// process's, the viewers' shared one for a viewer, and its token's own;
// release gives them back. false: one is taken (429).
func (s *Server) reportSlot(r *http.Request) (release func(), ok bool) {
	p, _ := r.Context().Value(principalKey{}).(principal)
	s.reportMu.Lock()
	if s.reportBy[p.actor] {
		s.reportMu.Unlock()
		return nil, false
	}
	s.reportBy[p.actor] = true
	s.reportMu.Unlock()
	held := []chan struct{}{}
	release = func() {
		for _, c := range held {
			<-c
		}
		s.reportMu.Lock()
		delete(s.reportBy, p.actor)
		s.reportMu.Unlock()
	}
	slots := []chan struct{}{s.reports}
	if p.role < registry.RoleOperator {
		slots = []chan struct{}{s.viewerReports, s.reports}
	}
	for _, c := range slots {
		select {
		case c <- struct{}{}:
			held = append(held, c)
		default:
			release()
			return nil, false
		}
	}
	return release, true
}

// reportCSP is the policy of an HTML report: no script at all, its one
// inline style sheet (by hash), no framing.
var reportCSP = "default-src 'none'; style-src " + report.HTMLStyleHash + "; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// getReport answers GET /v1/reports?since=&until=&api=&owner=&target=&top=&format=
// (json by default; html and md as the CLI writes them).
func (s *Server) getReport(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rq := report.Query{Since: cmp.Or(q.Get("since"), "24h"), Until: q.Get("until"), Format: cmp.Or(q.Get("format"), "json"),
		API: q.Get("api"), Owner: q.Get("owner"), Target: 99.99, Top: 10}
	var err error
	if v := q.Get("target"); v != "" {
		if rq.Target, err = strconv.ParseFloat(v, 64); err != nil {
			writeUsage(w, &report.UsageError{Param: "target", Message: "must be a number of percent, got " + strconv.Quote(v)})
			return
		}
	}
	if v := q.Get("top"); v != "" {
		if rq.Top, err = strconv.Atoi(v); err != nil {
			writeUsage(w, &report.UsageError{Param: "top", Message: "must be a whole number, got " + strconv.Quote(v)})
			return
		}
	}
	o, err := rq.Options(time.Now().UTC())
	var ue *report.UsageError
	if errors.As(err, &ue) {
		writeUsage(w, ue)
		return
	}
	if s.js == nil {
		writeError(w, http.StatusServiceUnavailable, "REGISTRY_UNAVAILABLE", "this admin API has no NATS connection to read the SLA records over")
		return
	}
	release, ok := s.reportSlot(r)
	if !ok {
		writeError(w, http.StatusTooManyRequests, "TOO_MANY_REPORTS", "reports are being built already (one at a time per token, and viewers share one); try again in a moment")
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), reportTimeout)
	defer cancel()
	size, err := report.Estimate(ctx, s.js, o.From)
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	if size > maxReportBytes {
		writeUsage(w, &report.UsageError{Param: "since", Message: "the period holds about " + strconv.FormatInt(size>>20, 10) + " MiB of SLA records, more than a report over the API reads (" +
			strconv.FormatInt(maxReportBytes>>20, 10) + " MiB): narrow it, or run jetway report"})
		return
	}
	in, err := report.Read(ctx, s.js, s.c, o)
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	var b bytes.Buffer
	if err := report.Write(&b, report.Build(in, o), o.Format); err != nil {
		s.log.Error("report not written", "err", err)
		writeError(w, http.StatusInternalServerError, "INTERNAL", "the report could not be written")
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	switch o.Format {
	case "json":
		writeRaw(w, http.StatusOK, b.Bytes())
		return
	case "html":
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Security-Policy", reportCSP)
		h.Set("Referrer-Policy", "no-referrer")
	default:
		h.Set("Content-Type", "text/markdown; charset=utf-8")
	}
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
}

// writeUsage answers a report query that does not read: 400 BAD_REQUEST
// naming the parameter, as the CLI's usage error names its flag.
func writeUsage(w http.ResponseWriter, ue *report.UsageError) {
	writeJSON(w, http.StatusBadRequest, apiError{Code: "BAD_REQUEST", Message: ue.Error(), Problems: []problem{{Path: ue.Param, Message: ue.Message}}})
}

// ScheduleItem is an owner's report schedule as the admin API shows it:
// the webhook's URL without its path and query (report.RedactedURL), and
// how its last delivery went.
type ScheduleItem struct {
	Owner    string                   `json:"owner"`
	Revision uint64                   `json:"revision"`
	Schedule *registry.ReportSchedule `json:"schedule"`
	Delivery *registry.ReportDelivery `json:"delivery,omitempty"`
}

func scheduleItem(sch *registry.ReportSchedule, d *registry.ReportDelivery) ScheduleItem {
	v := *sch
	if sch.Webhook != nil {
		hook := *sch.Webhook
		hook.URL = report.RedactedURL(hook.URL)
		v.Webhook = &hook
	}
	return ScheduleItem{Owner: sch.Owner, Revision: sch.Revision, Schedule: &v, Delivery: d}
}

// reportStore opens the schedules' bucket (jetway_reports); false when
// it answered the request.
func (s *Server) reportStore(w http.ResponseWriter, r *http.Request) (*registry.Reports, bool) {
	if s.js == nil {
		writeError(w, http.StatusServiceUnavailable, "REGISTRY_UNAVAILABLE", "this admin API has no NATS connection to the report schedules")
		return nil, false
	}
	st, err := registry.OpenReports(r.Context(), s.js, registry.BucketOptions{})
	if err != nil {
		writeRegistryError(w, err, s.log)
		return nil, false
	}
	return st, true
}

// listSchedules answers every owner's schedule, by owner, with its last
// delivery; a stored one that does not validate is in "invalid".
func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) {
	st, ok := s.reportStore(w, r)
	if !ok {
		return
	}
	scheds, bad, err := st.List(r.Context())
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	items := make([]ScheduleItem, 0, len(scheds))
	for _, sch := range scheds {
		d, err := st.Delivery(r.Context(), sch.Owner)
		if err != nil {
			s.log.Warn("report delivery not read", "owner", sch.Owner, "err", err)
		}
		items = append(items, scheduleItem(sch, d))
	}
	invalid := make([]string, 0, len(bad))
	for _, e := range bad {
		invalid = append(invalid, e.Error())
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "invalid": invalid})
}

// putSchedule writes an owner's schedule at the revision If-Match names,
// or new with If-None-Match: *. A webhook URL given as the list shows it
// (redacted) keeps the stored one, so a schedule can be edited without
// knowing its secret.
func (s *Server) putSchedule(w http.ResponseWriter, r *http.Request) {
	owner, ok := pathParam(w, r, "name")
	if !ok {
		return
	}
	opt, doc, ok := readWrite(w, r)
	if !ok {
		return
	}
	sch, err := registry.ParseReportSchedule(doc)
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	if !sameName(w, "schedule", owner, sch.Owner) {
		return
	}
	st, ok := s.reportStore(w, r)
	if !ok {
		return
	}
	if sch.Webhook != nil && report.IsRedacted(sch.Webhook.URL) {
		// Only the exact redacted form of the stored URL keeps it (not
		// another scheme or host with its secret path); a redacted URL
		// with nothing to keep would store the placeholder.
		var stored string
		if cur, err := st.Get(r.Context(), owner); err == nil && cur.Webhook != nil {
			stored = cur.Webhook.URL
		}
		if kept := report.KeptURL(sch.Webhook.URL, stored); kept != sch.Webhook.URL {
			sch.Webhook.URL = kept
		} else {
			writeJSON(w, http.StatusBadRequest, apiError{Code: "INVALID_ENTRY", Message: "the webhook's URL is a redacted one that is not the stored schedule's; give the whole URL",
				Problems: []problem{{Path: "webhook.url", Message: "is redacted (…) and the stored schedule has no webhook at this scheme and host to keep: give the whole URL"}}})
			return
		}
	}
	rev, err := s.client(w, r).PutReportSchedule(r.Context(), st, sch, opt)
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	s.log.Info("report schedule stored", "owner", owner, "revision", rev, "actor", actor(r))
	sch.Revision = rev
	w.Header().Set("ETag", etag(rev))
	writeJSON(w, http.StatusOK, scheduleItem(sch, nil))
}

// deleteSchedule removes an owner's schedule (and its delivery record) at
// the revision If-Match names.
func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request) {
	owner, ok := pathParam(w, r, "name")
	if !ok {
		return
	}
	rev, ok := ifMatch(w, r)
	if !ok {
		return
	}
	st, ok := s.reportStore(w, r)
	if !ok {
		return
	}
	if err := s.client(w, r).DeleteReportSchedule(r.Context(), st, owner, registry.IfRevision(rev)); err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	s.log.Info("report schedule deleted", "owner", owner, "revision", rev, "actor", actor(r))
	w.WriteHeader(http.StatusNoContent)
}

// pathParam is a path parameter decoded: chi matches on the escaped path
// when it has one (an owner with a slash), and gives it escaped then.
func pathParam(w http.ResponseWriter, r *http.Request, key string) (string, bool) {
	v := chi.URLParam(r, key)
	if r.URL.RawPath == "" {
		return v, true
	}
	d, err := url.PathUnescape(v)
	if err != nil {
		writeError(w, http.StatusBadRequest, "BAD_REQUEST", "the path's "+key+" does not decode")
		return "", false
	}
	return d, true
}
