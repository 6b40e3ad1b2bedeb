package report

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/otel"
)

// Query is a report asked for, as jetway report's flags and GET
// /v1/reports's parameters give it: the period's ends as ParseWhen reads
// them (Until "": now).
type Query struct {
	Since, Until string
	Format       string
	API, Owner   string
	Target       float64 // percent
	Top          int
}

// UsageError is a Query that does not read: Param names the flag or
// parameter at fault.
type UsageError struct {
	Param   string
	Message string
}

func (e *UsageError) Error() string { return e.Param + ": " + e.Message }

// Options reads q at now; every error is a *UsageError.
func (q Query) Options(now time.Time) (Options, error) {
	o := Options{Format: q.Format, API: q.API, Owner: q.Owner, Target: q.Target, Top: q.Top, Until: now}
	var err error
	if o.From, err = ParseWhen(q.Since, now); err != nil {
		return o, &UsageError{"since", err.Error()}
	}
	if q.Until != "" {
		if o.Until, err = ParseWhen(q.Until, now); err != nil {
			return o, &UsageError{"until", err.Error()}
		}
	}
	switch {
	case !o.From.Before(o.Until):
		return o, &UsageError{"since", fmt.Sprintf("the period is empty: %s is not before the end, %s", o.From.Format(time.RFC3339), o.Until.Format(time.RFC3339))}
	case !slices.Contains(Formats, o.Format):
		return o, &UsageError{"format", fmt.Sprintf("must be md, html or json, got %q", o.Format)}
	case o.Target <= 0 || o.Target > 100:
		return o, &UsageError{"target", "must be in (0, 100]"}
	case o.Top < 0:
		return o, &UsageError{"top", "must not be negative"}
	}
	return o, nil
}

// ParseWhen reads a point in time: a duration back from now (with d for
// days), a date (UTC) or an RFC 3339 time.
func ParseWhen(s string, now time.Time) (time.Time, error) {
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

// Estimate is about how many bytes of SLA records a report from from on
// reads: the records stored at or after from (their count, from where an
// ordered consumer started at that time begins) times the stream's mean
// record size. 0 when there is no stream or nothing after from. One
// fetch of one record: cheap next to the read it guards.
func Estimate(ctx context.Context, js jetstream.JetStream, from time.Time) (int64, error) {
	st, err := js.Stream(ctx, otel.SLAStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("opening the SLA records: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the SLA records: %w", err)
	}
	if info.State.Msgs == 0 || info.State.LastTime.Before(from) {
		return 0, nil
	}
	mean := int64(info.State.Bytes / info.State.Msgs)
	if !from.After(info.State.FirstTime) {
		return int64(info.State.Bytes), nil
	}
	start := from
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy,
		OptStartTime: &start, InactiveThreshold: 5 * time.Second})
	if err != nil {
		return 0, fmt.Errorf("reading the SLA records: %w", err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
	if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the SLA records: %w", err)
	}
	md, err := msg.Metadata()
	if err != nil {
		return 0, fmt.Errorf("reading the SLA records: %w", err)
	}
	return int64(md.NumPending+1) * mean, nil
}
