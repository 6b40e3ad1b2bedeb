package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/schemas"
)

// BucketAlerts holds alert rules: key = rule name, value = AlertRule JSON.
const BucketAlerts = bus.BucketAlerts

// Alert kinds.
const (
	AlertSuccessRateBelow  = "success_rate_below"  // success share of passed calls over Window < Threshold
	AlertP99Above          = "p99_above"           // p99 latency over Window > Latency
	AlertBreakerOpened     = "breaker_opened"      // the API's breaker is open in its pool
	AlertChannelCut        = "channel_cut"         // a channel of the API's channel set is cut, probing or ramping: one alert per channel
	AlertReleaseRolledBack = "release_rolled_back" // the API's gray release was rolled back (a gate breached, or an operator), until it runs again
	AlertNoWorkers         = "no_workers"          // no live worker serves the rule's Pool
	// Async jobs (docs/async.md), from the job streams.
	AlertJobQueueAbove    = "job_queue_above"    // more than Jobs jobs of the API in the jobs stream
	AlertJobAgeAbove      = "job_age_above"      // its oldest job was submitted more than Age ago
	AlertDeadLettersAbove = "dead_letters_above" // more than DeadLetters new dead letters over Window
	// AlertOnStandby fires while an edge sends its calls to its standby
	// NATS cluster (--nats-standby), one alert per edge.
	AlertOnStandby = "on_standby"
)

// AlertRule is one alert rule. Firing and resolving are published on
// jetway.alerts.<rule>.<target> — the API, the pool (no_workers), the
// edge (on_standby) or <api>/<channel> (channel_cut) — and, with Webhook,
// POSTed there; repeats are suppressed while an alert stays firing.
type AlertRule struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// API the rule watches, or "*" for every API (not for no_workers or
	// on_standby); channel_cut watches every channel of the API.
	API string `json:"api,omitempty"`
	// Pool, for no_workers.
	Pool string `json:"pool,omitempty"`
	// Threshold, for success_rate_below: a share in (0, 1).
	Threshold float64 `json:"threshold,omitempty"`
	// Latency, for p99_above.
	Latency Duration `json:"latency,omitempty"`
	// Jobs, for job_queue_above; Age, for job_age_above; DeadLetters,
	// for dead_letters_above (new ones over Window, default 5m there).
	Jobs        int      `json:"jobs,omitempty"`
	Age         Duration `json:"age,omitempty"`
	DeadLetters int      `json:"dead_letters,omitempty"`
	// Window the condition is computed over (default 1m), and the calls it
	// must hold before the rule judges (default 20).
	Window   Duration `json:"window,omitempty"`
	MinCalls int      `json:"min_calls,omitempty"`
	// Webhook, if set, receives every firing and resolving as a JSON POST.
	Webhook string `json:"webhook,omitempty"`

	Revision uint64 `json:"-"`
}

// WindowOrDefault is the rule's window.
func (r *AlertRule) WindowOrDefault() time.Duration {
	if r.Window <= 0 && r.Kind == AlertDeadLettersAbove {
		return 5 * time.Minute
	}
	if r.Window <= 0 {
		return time.Minute
	}
	return time.Duration(r.Window)
}

// MinCallsOrDefault is the rule's minimum number of calls.
func (r *AlertRule) MinCallsOrDefault() int64 {
	if r.MinCalls <= 0 {
		return 20
	}
	return int64(r.MinCalls)
}

// ParseAlert decodes and checks an alert rule stored under key.
func ParseAlert(key string, doc []byte) (*AlertRule, error) {
	var ps []schemas.Problem
	add := func(path, format string, args ...any) {
		ps = append(ps, schemas.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	js, err := ToJSON(doc)
	if err != nil {
		return nil, &ValidationError{Key: key, Problems: []schemas.Problem{{Message: err.Error()}}}
	}
	var r AlertRule
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, &ValidationError{Key: key, Problems: []schemas.Problem{{Message: err.Error()}}}
	}
	if err := bus.ValidName(r.Name); err != nil {
		add("name", "%v", err)
	} else if key != "" && key != r.Name {
		add("name", "must equal the key it is stored under (%q)", key)
	}
	switch r.Kind {
	case AlertSuccessRateBelow:
		if r.Threshold <= 0 || r.Threshold >= 1 {
			add("threshold", "must be a share between 0 and 1 (e.g. 0.99)")
		}
	case AlertP99Above:
		if r.Latency <= 0 {
			add("latency", "is required: a duration such as \"300ms\"")
		}
	case AlertBreakerOpened, AlertChannelCut, AlertReleaseRolledBack:
	case AlertNoWorkers:
		if err := bus.ValidName(r.Pool); err != nil {
			add("pool", "%v", err)
		}
	case AlertJobQueueAbove:
		if r.Jobs <= 0 {
			add("jobs", "is required: a number of queued jobs, such as 1000")
		}
	case AlertJobAgeAbove:
		if r.Age <= 0 {
			add("age", "is required: a duration such as \"10m\"")
		}
	case AlertDeadLettersAbove:
		if r.DeadLetters < 0 {
			add("dead_letters", "must not be negative (0: any new dead letter)")
		}
	case AlertOnStandby:
	default:
		add("kind", "must be success_rate_below, p99_above, breaker_opened, channel_cut, release_rolled_back, no_workers, job_queue_above, job_age_above, dead_letters_above or on_standby")
	}
	if r.Kind != AlertNoWorkers && r.Kind != AlertOnStandby {
		if r.API == "" {
			add("api", "is required: an API name or \"*\"")
		} else if r.API != "*" {
			if err := bus.ValidName(r.API); err != nil {
				add("api", "%v", err)
			}
		}
	}
	if r.Window < 0 || time.Duration(r.Window) > 24*time.Hour || (r.Window > 0 && time.Duration(r.Window) < time.Second) {
		add("window", "must be between 1s and 24h")
	}
	if r.Webhook != "" {
		if u, err := url.Parse(r.Webhook); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("webhook", "must be an http:// or https:// URL")
		}
	}
	if len(ps) > 0 {
		return nil, &ValidationError{Key: key, Problems: ps}
	}
	return &r, nil
}

// OpenAlerts opens the jetway_alerts bucket, creating it when missing.
func OpenAlerts(ctx context.Context, js jetstream.JetStream, o BucketOptions) (jetstream.KeyValue, error) {
	return openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      BucketAlerts,
		Description: "Jetway alert rules (key = rule name)",
		History:     HistoryDepth,
		Replicas:    max(o.Replicas, 1),
	})
}
