package registry

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/schemas"
)

// BucketReports holds the SLA report schedules — who gets their report,
// how often and how (docs/reports.md) — each owner's last delivery, and
// the lease of the node that sends them. The admin only (bus/auth.go).
const BucketReports = bus.BucketReports

// Keys of BucketReports: schedule.<owner>, delivery.<owner> (the owner
// base64url-encoded: an owner may hold spaces and any printable
// character), and the sender's lease.
const (
	reportScheduleKey = "schedule."
	reportDeliveryKey = "delivery."
	reportLeaseKey    = "lease"
)

// ReportSchedule is one owner's SLA report delivery: the value of
// schedule.<owner> in BucketReports.
type ReportSchedule struct {
	Owner string `json:"owner"`
	// Every is daily or weekly.
	Every string `json:"every"`
	// At is the time of day it is sent, HH:MM in UTC (default 07:00); a
	// daily report covers the 24 hours before it, a weekly one the 7 days.
	At string `json:"at,omitempty"`
	// Weekday is a weekly report's day (default monday).
	Weekday string `json:"weekday,omitempty"`
	// Format is md (default), html or json: the mail's body; a webhook
	// gets the JSON and the Markdown always, the HTML when asked.
	Format  string         `json:"format,omitempty"`
	Webhook *ReportWebhook `json:"webhook,omitempty"`
	SMTP    *ReportSMTP    `json:"smtp,omitempty"`

	Revision uint64 `json:"-"`
}

// ReportWebhook is an HTTP POST of the report.
type ReportWebhook struct {
	URL string `json:"url"`
	// AllowPrivate lets the webhook reach loopback, private and other
	// non-public addresses, as an async API's callbacks.allow_private.
	AllowPrivate bool `json:"allow_private,omitempty"`
	// SecretEnv names an environment variable of the sending node
	// (JETWAY_REPORT_…) that holds the key the POST is signed with
	// (JW1-HMAC-SHA256, app "jetway-report"; package sign). The key is
	// never stored here.
	SecretEnv string `json:"secret_env,omitempty"`
	// Timeout bounds each attempt (default 10s, at most 1m); Attempts
	// (1–10, default 5) are tried with a backoff doubling from 1s.
	Timeout  Duration `json:"timeout,omitempty"`
	Attempts int      `json:"attempts,omitempty"`
}

// ReportSMTP is a mail of the report, with STARTTLS when the server
// offers it.
type ReportSMTP struct {
	Host string   `json:"host"`
	Port int      `json:"port,omitempty"` // default 587
	From string   `json:"from"`
	To   []string `json:"to"`
	// Username logs in (AUTH PLAIN, only over TLS or to localhost) with
	// the password in the environment variable PasswordEnv of the sending
	// node (named JETWAY_REPORT_…): passwords are not stored in the
	// registry. A login requires RequireTLS.
	Username    string `json:"username,omitempty"`
	PasswordEnv string `json:"password_env,omitempty"`
	// RequireTLS refuses to send when the server does not offer STARTTLS.
	RequireTLS bool `json:"require_tls,omitempty"`
	// AllowPrivate lets the server be at a non-public address.
	AllowPrivate bool     `json:"allow_private,omitempty"`
	Timeout      Duration `json:"timeout,omitempty"` // each attempt; default 30s, at most 5m
	Attempts     int      `json:"attempts,omitempty"`
}

// Report schedule defaults and bounds.
const (
	DefaultReportAt          = "07:00"
	DefaultReportWebhookWait = 10 * time.Second
	DefaultReportSMTPWait    = 30 * time.Second
	DefaultReportAttempts    = 5
	MaxReportAttempts        = 10
	// ReportEnvPrefix starts every environment variable a schedule may
	// name (webhook.secret_env, smtp.password_env): a schedule must not
	// make the sending node send any other variable of its environment.
	ReportEnvPrefix = "JETWAY_REPORT_"
)

var (
	reportAt  = regexp.MustCompile(`^([01][0-9]|2[0-3]):[0-5][0-9]$`)
	envName   = regexp.MustCompile(`^` + ReportEnvPrefix + `[A-Za-z0-9_]{1,100}$`)
	weekdays  = []string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}
	hostLabel = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
)

// ParseReportSchedule decodes, checks and defaults a schedule given as
// JSON or YAML. Every problem is in the *ValidationError it returns.
func ParseReportSchedule(doc []byte) (*ReportSchedule, error) {
	js, err := ToJSON(doc)
	if err != nil {
		return nil, &ValidationError{Problems: []schemas.Problem{{Message: err.Error()}}}
	}
	var s ReportSchedule
	d := json.NewDecoder(bytes.NewReader(js))
	d.DisallowUnknownFields()
	if err := d.Decode(&s); err != nil {
		msg := err.Error()
		if strings.Contains(msg, `"password"`) || strings.Contains(msg, `"secret"`) {
			msg += ": passwords and keys are not stored in the registry; name the sending node's environment variable (smtp.password_env, webhook.secret_env)"
		}
		return nil, &ValidationError{Problems: []schemas.Problem{{Message: "a report schedule is one JSON object {owner, every, at, weekday, format, webhook, smtp}: " + msg}}}
	}
	if d.More() {
		return nil, &ValidationError{Problems: []schemas.Problem{{Message: "a report schedule is one JSON object"}}}
	}
	if ps := s.check(); len(ps) > 0 {
		return nil, &ValidationError{Key: s.Owner, Problems: ps}
	}
	s.applyDefaults()
	return &s, nil
}

func (s *ReportSchedule) check() []schemas.Problem {
	var ps []schemas.Problem
	add := func(path, format string, args ...any) {
		ps = append(ps, schemas.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if err := CheckOwner(s.Owner); err != nil {
		add("owner", "%v", err)
	}
	if s.Every != "daily" && s.Every != "weekly" {
		add("every", "must be daily or weekly (got %q)", s.Every)
	}
	if s.At != "" && !reportAt.MatchString(s.At) {
		add("at", "must be HH:MM in UTC, 00:00 to 23:59 (got %q)", s.At)
	}
	if s.Weekday != "" {
		if s.Every != "weekly" {
			add("weekday", "is for weekly reports only")
		} else if !slices.Contains(weekdays, strings.ToLower(s.Weekday)) {
			add("weekday", "must be a day of the week, monday to sunday (got %q)", s.Weekday)
		}
	}
	if s.Format != "" && s.Format != "md" && s.Format != "html" && s.Format != "json" {
		add("format", "must be md, html or json (got %q)", s.Format)
	}
	if s.Webhook == nil && s.SMTP == nil {
		add("", "give webhook or smtp (or both): where the report goes")
	}
	if w := s.Webhook; w != nil {
		if _, err := ReportWebhookURL(w.URL, w.AllowPrivate); err != nil {
			add("webhook.url", "%v", err)
		}
		if w.SecretEnv != "" && !envName.MatchString(w.SecretEnv) {
			add("webhook.secret_env", "must be an environment variable's name starting with %s (got %q)", ReportEnvPrefix, w.SecretEnv)
		}
		if w.Timeout < 0 || time.Duration(w.Timeout) > MaxCallbackTimeout {
			add("webhook.timeout", "must be between 1ms and %v", MaxCallbackTimeout)
		}
		if w.Attempts < 0 || w.Attempts > MaxReportAttempts {
			add("webhook.attempts", "must be between 1 and %d", MaxReportAttempts)
		}
	}
	if m := s.SMTP; m != nil {
		if err := checkMailHost(m.Host, m.AllowPrivate); err != nil {
			add("smtp.host", "%v", err)
		}
		if m.Port < 0 || m.Port > 65535 {
			add("smtp.port", "must be between 1 and 65535")
		}
		if a, err := mail.ParseAddress(m.From); err != nil || strings.ContainsAny(m.From, "\r\n") {
			add("smtp.from", "must be a mail address (got %q)", m.From)
		} else if a.Address == "" {
			add("smtp.from", "must be a mail address")
		}
		if len(m.To) == 0 || len(m.To) > 50 {
			add("smtp.to", "must list 1 to 50 addresses")
		}
		for i, to := range m.To {
			if _, err := mail.ParseAddress(to); err != nil || strings.ContainsAny(to, "\r\n") {
				add(fmt.Sprintf("smtp.to[%d]", i), "must be a mail address (got %q)", to)
			}
		}
		if strings.ContainsAny(m.Username, "\r\n\x00") {
			add("smtp.username", "must be one line")
		}
		if m.PasswordEnv != "" && !envName.MatchString(m.PasswordEnv) {
			add("smtp.password_env", "must be an environment variable's name starting with %s (got %q)", ReportEnvPrefix, m.PasswordEnv)
		}
		if (m.Username == "") != (m.PasswordEnv == "") {
			add("smtp.username", "username and password_env come together")
		}
		if (m.Username != "" || m.PasswordEnv != "") && !m.RequireTLS {
			add("smtp.require_tls", "must be true with a username and password_env: a password is never sent in the clear")
		}
		if m.Timeout < 0 || time.Duration(m.Timeout) > 5*time.Minute {
			add("smtp.timeout", "must be between 1ms and 5m")
		}
		if m.Attempts < 0 || m.Attempts > MaxReportAttempts {
			add("smtp.attempts", "must be between 1 and %d", MaxReportAttempts)
		}
	}
	return ps
}

func (s *ReportSchedule) applyDefaults() {
	s.At = cmpOr(s.At, DefaultReportAt)
	s.Format = cmpOr(s.Format, "md")
	if s.Every == "weekly" {
		s.Weekday = strings.ToLower(cmpOr(s.Weekday, "monday"))
	}
	if w := s.Webhook; w != nil {
		if w.Timeout == 0 {
			w.Timeout = Duration(DefaultReportWebhookWait)
		}
		if w.Attempts == 0 {
			w.Attempts = DefaultReportAttempts
		}
	}
	if m := s.SMTP; m != nil {
		if m.Port == 0 {
			m.Port = 587
		}
		if m.Timeout == 0 {
			m.Timeout = Duration(DefaultReportSMTPWait)
		}
		if m.Attempts == 0 {
			m.Attempts = DefaultReportAttempts
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// ReportWebhookURL checks a report webhook's URL by the rule of async
// callbacks: http or https, a host, no user or fragment, and — unless
// allowPrivate — no address that is not public when the host is an
// address (a name is checked again on every connection, once resolved).
func ReportWebhookURL(s string, allowPrivate bool) (string, error) {
	if len(s) > 2048 {
		return "", errors.New("is longer than 2048 bytes")
	}
	u, err := parseCallbackURL(s, false)
	if err != nil {
		return "", err
	}
	if !allowPrivate {
		if ip := net.ParseIP(u.Hostname()); ip != nil && !PublicIP(ip) {
			return "", fmt.Errorf("names an address that is not public (%s): set allow_private to send there", u.Hostname())
		}
		if h := strings.ToLower(strings.TrimSuffix(u.Hostname(), ".")); h == "localhost" || strings.HasSuffix(h, ".localhost") {
			return "", errors.New("names localhost: set allow_private to send there")
		}
	}
	return u.String(), nil
}

// checkMailHost checks an SMTP server's host name or address.
func checkMailHost(h string, allowPrivate bool) error {
	if h == "" {
		return errors.New("is required")
	}
	if ip := net.ParseIP(h); ip != nil {
		if !allowPrivate && !PublicIP(ip) {
			return fmt.Errorf("%s is not a public address: set allow_private to send there", h)
		}
		return nil
	}
	if len(h) > 253 {
		return errors.New("is longer than 253 characters")
	}
	for l := range strings.SplitSeq(strings.TrimSuffix(h, "."), ".") {
		if !hostLabel.MatchString(l) {
			return fmt.Errorf("must be a host name or an IP address (got %q)", h)
		}
	}
	if lh := strings.ToLower(strings.TrimSuffix(h, ".")); !allowPrivate && (lh == "localhost" || strings.HasSuffix(lh, ".localhost")) {
		return errors.New("names localhost: set allow_private to send there")
	}
	return nil
}

// Due is the latest time the report was due at or before now (UTC), and
// the period it covers: the day or the week before it.
func (s *ReportSchedule) Due(now time.Time) (due, from time.Time) {
	now = now.UTC()
	hh, _ := strconv.Atoi(s.At[:2])
	mm, _ := strconv.Atoi(s.At[3:])
	due = time.Date(now.Year(), now.Month(), now.Day(), hh, mm, 0, 0, time.UTC)
	if due.After(now) {
		due = due.AddDate(0, 0, -1)
	}
	if s.Every != "weekly" {
		return due, due.AddDate(0, 0, -1)
	}
	want := time.Weekday(slices.Index(weekdays, s.Weekday))
	for due.Weekday() != want {
		due = due.AddDate(0, 0, -1)
	}
	return due, due.AddDate(0, 0, -7)
}

// ReportDelivery is how an owner's report last went: the value of
// delivery.<owner>. Due is the slot (ReportSchedule.Due) it is about;
// State is sending (a node claimed it), sent or failed (NextTry says when
// it is tried again).
type ReportDelivery struct {
	Owner     string    `json:"owner"`
	Due       time.Time `json:"due"`
	State     string    `json:"state"`
	By        string    `json:"by,omitempty"` // the node that claimed it
	Claimed   time.Time `json:"claimed"`
	Tries     int       `json:"tries"` // claims of this slot
	LastSent  time.Time `json:"last_sent,omitzero"`
	LastError string    `json:"last_error,omitempty"`
	NextTry   time.Time `json:"next_try,omitzero"`

	Revision uint64 `json:"-"`
}

// Delivery states.
const (
	ReportSending = "sending"
	ReportSent    = "sent"
	ReportFailed  = "failed"
)

// ErrReportConflict is a delivery record or lease changed by another
// node since it was read.
var ErrReportConflict = errors.New("changed by another node")

// Reports is the BucketReports store.
type Reports struct{ kv jetstream.KeyValue }

// OpenReports opens the jetway_reports bucket, creating it when missing.
func OpenReports(ctx context.Context, js jetstream.JetStream, o BucketOptions) (*Reports, error) {
	kv, err := openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      BucketReports,
		Description: "Jetway SLA report schedules and deliveries (keys schedule.<owner>, delivery.<owner>, lease): the admin only",
		History:     5,
		Replicas:    max(o.Replicas, 1),
	})
	if err != nil {
		return nil, err
	}
	return &Reports{kv: kv}, nil
}

func ownerKey(prefix, owner string) string {
	return prefix + base64.RawURLEncoding.EncodeToString([]byte(owner))
}

// Put stores a schedule (checked by ParseReportSchedule). With
// IfRevision it writes only if the owner's schedule is at that revision
// (0: only if it has none), and fails with a *ConflictError otherwise.
func (r *Reports) Put(ctx context.Context, s *ReportSchedule, opts ...WriteOption) (uint64, error) {
	if ps := s.check(); len(ps) > 0 {
		return 0, &ValidationError{Key: s.Owner, Problems: ps}
	}
	b, err := json.Marshal(s)
	if err != nil {
		return 0, err
	}
	key := ownerKey(reportScheduleKey, s.Owner)
	o := collect(opts)
	var rev uint64
	switch {
	case o.ifRevision == nil:
		return r.kv.Put(ctx, key, b)
	case *o.ifRevision == 0:
		rev, err = r.kv.Create(ctx, key, b)
	default:
		rev, err = r.kv.Update(ctx, key, b, *o.ifRevision)
	}
	if isConflict(err) {
		return 0, r.conflict(ctx, s.Owner, *o.ifRevision)
	}
	return rev, err
}

// conflict is the *ConflictError of a write of owner's schedule that
// expected revision want.
func (r *Reports) conflict(ctx context.Context, owner string, want uint64) error {
	ce := &ConflictError{Kind: "report schedule", Key: owner, Want: want}
	if e, err := r.kv.Get(ctx, ownerKey(reportScheduleKey, owner)); err == nil {
		ce.Current = e.Revision()
	}
	return ce
}

// Get reads an owner's schedule; ErrNotFound when it has none.
func (r *Reports) Get(ctx context.Context, owner string) (*ReportSchedule, error) {
	e, err := r.kv.Get(ctx, ownerKey(reportScheduleKey, owner))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("report schedule of %q: %w", owner, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	s, err := ParseReportSchedule(e.Value())
	if err != nil {
		return nil, err
	}
	s.Revision = e.Revision()
	return s, nil
}

// List reads every schedule, by owner; a stored value that is no valid
// schedule is left out and reported in bad.
func (r *Reports) List(ctx context.Context) (out []*ReportSchedule, bad []error, err error) {
	keys, err := r.kv.ListKeys(ctx)
	if err != nil {
		return nil, nil, err
	}
	for k := range keys.Keys() {
		if !strings.HasPrefix(k, reportScheduleKey) {
			continue
		}
		e, err := r.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		} else if err != nil {
			return nil, nil, err
		}
		s, err := ParseReportSchedule(e.Value())
		if err != nil {
			bad = append(bad, fmt.Errorf("%s: %w", k, err))
			continue
		}
		s.Revision = e.Revision()
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *ReportSchedule) int { return strings.Compare(a.Owner, b.Owner) })
	return out, bad, nil
}

// Delete removes an owner's schedule and its delivery record. With
// IfRevision(n) only the schedule at revision n, else a *ConflictError.
func (r *Reports) Delete(ctx context.Context, owner string, opts ...WriteOption) error {
	e, err := r.kv.Get(ctx, ownerKey(reportScheduleKey, owner))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("report schedule of %q: %w", owner, ErrNotFound)
	} else if err != nil {
		return err
	}
	var popts []jetstream.KVDeleteOpt
	if o := collect(opts); o.ifRevision != nil {
		if e.Revision() != *o.ifRevision {
			return &ConflictError{Kind: "report schedule", Key: owner, Want: *o.ifRevision, Current: e.Revision()}
		}
		popts = append(popts, jetstream.LastRevision(*o.ifRevision))
	}
	if err := r.kv.Purge(ctx, ownerKey(reportScheduleKey, owner), popts...); err != nil {
		if isConflict(err) {
			return r.conflict(ctx, owner, e.Revision())
		}
		return err
	}
	if err := r.kv.Purge(ctx, ownerKey(reportDeliveryKey, owner)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	return nil
}

// PutReportSchedule stores an owner's schedule in r (Reports.Put, with
// its options) and records the write in the audit trail (kind report,
// action put, the owner as key): the CLI's and the admin API's writes
// of schedules, which decide where an owner's SLA figures are sent.
func (c *Client) PutReportSchedule(ctx context.Context, r *Reports, s *ReportSchedule, opts ...WriteOption) (uint64, error) {
	rev, err := r.Put(ctx, s, opts...)
	if err != nil {
		return 0, err
	}
	return rev, c.noted(ctx, "report", "put", s.Owner, rev, nil)
}

// DeleteReportSchedule removes an owner's schedule and its delivery
// record (Reports.Delete) and records it (kind report, action delete).
func (c *Client) DeleteReportSchedule(ctx context.Context, r *Reports, owner string, opts ...WriteOption) error {
	if err := r.Delete(ctx, owner, opts...); err != nil {
		return err
	}
	return c.noted(ctx, "report", "delete", owner, 0, nil)
}

// Delivery reads an owner's delivery record (nil: none yet).
func (r *Reports) Delivery(ctx context.Context, owner string) (*ReportDelivery, error) {
	e, err := r.kv.Get(ctx, ownerKey(reportDeliveryKey, owner))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var d ReportDelivery
	if err := json.Unmarshal(e.Value(), &d); err != nil {
		return nil, fmt.Errorf("delivery record of %q is damaged: %w", owner, err)
	}
	d.Revision = e.Revision()
	return &d, nil
}

// SetDelivery writes d if the record is still at d.Revision (0: none yet)
// — a compare-and-set, so two nodes never both claim one slot — and
// returns the new revision; ErrReportConflict when another node wrote it
// first.
func (r *Reports) SetDelivery(ctx context.Context, d *ReportDelivery) (uint64, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return 0, err
	}
	key := ownerKey(reportDeliveryKey, d.Owner)
	var rev uint64
	if d.Revision == 0 {
		rev, err = r.kv.Create(ctx, key, b)
	} else {
		rev, err = r.kv.Update(ctx, key, b, d.Revision)
	}
	if leaseConflict(err) {
		return 0, fmt.Errorf("delivery record of %q: %w", d.Owner, ErrReportConflict)
	}
	return rev, err
}

// leaseConflict reports a KV write that failed on its revision check.
func leaseConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// reportLease is the value of the lease key.
type reportLease struct {
	Holder string    `json:"holder"`
	Until  time.Time `json:"until"`
}

// Lease takes or renews the sender's lease for holder until now+ttl, by
// compare-and-set: true when holder has it. A lease another holder has
// renewed within its ttl is left alone.
func (r *Reports) Lease(ctx context.Context, holder string, now time.Time, ttl time.Duration) (bool, error) {
	b, _ := json.Marshal(reportLease{Holder: holder, Until: now.Add(ttl).UTC()})
	e, err := r.kv.Get(ctx, reportLeaseKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		_, err = r.kv.Create(ctx, reportLeaseKey, b)
		if leaseConflict(err) {
			return false, nil
		}
		return err == nil, err
	}
	if err != nil {
		return false, err
	}
	var cur reportLease
	if json.Unmarshal(e.Value(), &cur) == nil && cur.Holder != holder && now.Before(cur.Until) {
		return false, nil
	}
	_, err = r.kv.Update(ctx, reportLeaseKey, b, e.Revision())
	if leaseConflict(err) {
		return false, nil
	}
	return err == nil, err
}

// Release gives up holder's lease (when it still holds it).
func (r *Reports) Release(ctx context.Context, holder string) {
	e, err := r.kv.Get(ctx, reportLeaseKey)
	if err != nil {
		return
	}
	var cur reportLease
	if json.Unmarshal(e.Value(), &cur) == nil && cur.Holder == holder {
		_ = r.kv.Delete(ctx, reportLeaseKey, jetstream.LastRevision(e.Revision()))
	}
}
