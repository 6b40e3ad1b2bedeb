package registry

import (
	"fmt"
	"strconv"
	"time"
)

// Async lets an API's callers submit a call as a job: the edge answers
// 202 Accepted with the job's address once every edge policy has passed,
// the job is kept in the jobs stream, and a worker of the API's pool runs
// it with retries until it succeeds, fails for good or expires
// (docs/async.md). An empty object ({}) allows it with the defaults.
type Async struct {
	// Mode is "prefer" (the default: only calls that send
	// Prefer: respond-async become jobs) or "always" (every call does).
	Mode string `json:"mode,omitempty"`
	// Attempts in all, the first included: 1 to MaxAsyncAttempts
	// (default 3). An attempt is a call of the backend; a worker that
	// dies during one spends it.
	Attempts int `json:"attempts,omitempty"`
	// RetryOn lists the outcomes retried: "timeout" (no answer within
	// the attempt's timeout), "5xx", "4xx", or a status ("429").
	// Default: timeout, 408, 429, 5xx. A gateway error counts by its
	// status (a circuit open is a 503).
	RetryOn []string `json:"retry_on,omitempty"`
	// Backoff is the base of the full-jitter exponential backoff between
	// attempts (default 1s); MaxBackoff caps it (default 5m) and caps a
	// backend's Retry-After too.
	Backoff    Duration `json:"backoff,omitempty"`
	MaxBackoff Duration `json:"max_backoff,omitempty"`
	// AttemptTimeout bounds one attempt (default: the API's timeout; at
	// most MaxAsyncAttemptTimeout).
	AttemptTimeout Duration `json:"attempt_timeout,omitempty"`
	// MaxAge is how long a job may wait and retry before it is dead
	// (default 24h, at most MaxAsyncAge).
	MaxAge Duration `json:"max_age,omitempty"`
	// ResultTTL is how long a finished job's status and result are kept
	// (default 24h, at most MaxAsyncAge).
	ResultTTL Duration `json:"result_ttl,omitempty"`
	// MaxResult bounds the result body kept with the status (default
	// 16KiB, at most MaxAsyncResult); a larger body is kept in the results
	// stream, and the status links it.
	MaxResult Size `json:"max_result,omitempty"`
	// Callbacks tell the job's end to its caller's X-Callback-Url and
	// the API's own destinations (callbacks.go).
	Callbacks *Callbacks `json:"callbacks,omitempty"`
}

// Async defaults and bounds.
const (
	AsyncPrefer = "prefer"
	AsyncAlways = "always"

	DefaultAsyncAttempts   = 3
	MaxAsyncAttempts       = 20
	DefaultAsyncBackoff    = time.Second
	DefaultAsyncMaxBackoff = 5 * time.Minute
	DefaultAsyncAge        = 24 * time.Hour
	MaxAsyncAge            = 7 * 24 * time.Hour
	MaxAsyncAttemptTimeout = 15 * time.Minute
	DefaultAsyncResult     = Size(16 << 10)
	MaxAsyncResult         = Size(256 << 10)
)

// DefaultAsyncRetryOn are the outcomes an async job retries by default.
var DefaultAsyncRetryOn = []string{"timeout", "408", "429", "5xx"}

// check adds the problems of an async block.
func (as *Async) check(prefix string, add func(path, format string, args ...any)) {
	if as == nil {
		return
	}
	switch as.Mode {
	case "", AsyncPrefer, AsyncAlways:
	default:
		add(prefix+".mode", "must be %q or %q", AsyncPrefer, AsyncAlways)
	}
	if as.Attempts < 0 || as.Attempts > MaxAsyncAttempts {
		add(prefix+".attempts", "must be between 1 and %d", MaxAsyncAttempts)
	}
	for i, on := range as.RetryOn {
		if !validRetryOn(on) {
			add(fmt.Sprintf("%s.retry_on[%d]", prefix, i), "must be \"timeout\", \"4xx\", \"5xx\" or a status from 400 to 599 (got %q)", on)
		}
	}
	positive := func(path string, d Duration, ceiling time.Duration) {
		if d < 0 || (ceiling > 0 && time.Duration(d) > ceiling) {
			add(prefix+"."+path, "must be between 1ms and %v", ceiling)
		} else if d != 0 && time.Duration(d) < time.Millisecond {
			add(prefix+"."+path, "must be at least 1ms")
		}
	}
	positive("backoff", as.Backoff, time.Hour)
	positive("max_backoff", as.MaxBackoff, 24*time.Hour)
	positive("attempt_timeout", as.AttemptTimeout, MaxAsyncAttemptTimeout)
	positive("max_age", as.MaxAge, MaxAsyncAge)
	positive("result_ttl", as.ResultTTL, MaxAsyncAge)
	if as.Backoff > 0 && as.MaxBackoff > 0 && as.MaxBackoff < as.Backoff {
		add(prefix+".max_backoff", "must not be below backoff")
	}
	if as.MaxResult < 0 || as.MaxResult > MaxAsyncResult {
		add(prefix+".max_result", "must be between 0 and %v", MaxAsyncResult)
	}
	as.Callbacks.check(prefix+".callbacks", add)
}

func validRetryOn(on string) bool {
	switch on {
	case "timeout", "4xx", "5xx":
		return true
	}
	n, err := strconv.Atoi(on)
	return err == nil && n >= 400 && n <= 599 && strconv.Itoa(n) == on
}

// applyDefaults fills what an async block leaves out; apiTimeout is the
// API's own (the attempt timeout's default).
func (as *Async) applyDefaults(apiTimeout Duration) {
	if as.Mode == "" {
		as.Mode = AsyncPrefer
	}
	if as.Attempts == 0 {
		as.Attempts = DefaultAsyncAttempts
	}
	if len(as.RetryOn) == 0 {
		as.RetryOn = DefaultAsyncRetryOn
	}
	if as.Backoff == 0 {
		as.Backoff = Duration(DefaultAsyncBackoff)
	}
	if as.MaxBackoff == 0 {
		as.MaxBackoff = Duration(max(DefaultAsyncMaxBackoff, time.Duration(as.Backoff)))
	}
	if as.AttemptTimeout == 0 {
		as.AttemptTimeout = apiTimeout
	}
	if as.MaxAge == 0 {
		as.MaxAge = Duration(DefaultAsyncAge)
	}
	if as.ResultTTL == 0 {
		as.ResultTTL = Duration(DefaultAsyncAge)
	}
	if as.MaxResult == 0 {
		as.MaxResult = DefaultAsyncResult
	}
	if as.Callbacks != nil {
		as.Callbacks.applyDefaults()
	}
}

// DefaultAsyncConfig is an async block of defaults only, for an API of
// the default timeout.
func DefaultAsyncConfig() *Async {
	a := &Async{}
	a.applyDefaults(Duration(DefaultTimeout))
	return a
}

// Retries reports whether an attempt that ended with status (a gateway
// error counted by its status; timedOut when no answer came in time) is
// one the API retries.
func (as *Async) Retries(status int, timedOut bool) bool {
	for _, on := range as.RetryOn {
		switch on {
		case "timeout":
			if timedOut {
				return true
			}
		case "4xx":
			if status >= 400 && status < 500 {
				return true
			}
		case "5xx":
			if status >= 500 && status < 600 {
				return true
			}
		default:
			if strconv.Itoa(status) == on {
				return true
			}
		}
	}
	return false
}
