package resilience

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"time"
)

// Defaults that NewRetryBudget puts in place of a RetryBudgetConfig's zero
// fields.
const (
	// DefaultRetryRatio is the share of requests that retries may add.
	DefaultRetryRatio = 0.10
	// DefaultRetryMinPerSecond is the floor of retries allowed per second
	// of the window whatever the traffic.
	DefaultRetryMinPerSecond = 1.0
	// DefaultRetryWindow is the length of the sliding window.
	DefaultRetryWindow = 10 * time.Second
)

// maxRetryWindow bounds a budget's window so that its counts cannot overflow.
const maxRetryWindow = 24 * time.Hour

// RetryBudgetConfig configures a RetryBudget. Each field maps 1:1 to a field
// of the retry budget object in a registry API entry (JSON name in
// brackets). A zero field takes its default.
type RetryBudgetConfig struct {
	// Ratio in (0, 1] is the most retries may add, as a share of the
	// requests seen over Window [ratio]. Default 0.10.
	Ratio float64
	// MinPerSecond is a floor of retries per second, allowed on top of
	// Ratio, so that an API with little traffic can still retry
	// [min_per_second]: over a window, retries ≤ Ratio×requests +
	// MinPerSecond×Window. Default 1; a negative value means no floor.
	MinPerSecond float64
	// Window is the length of the sliding window [window]; from 100ms to
	// 24h. Default 10s. It is time-based with 10 buckets, like a breaker's.
	Window time.Duration
}

// Validate reports every problem of c at once (joined with errors.Join),
// each naming its field by its JSON name.
func (c RetryBudgetConfig) Validate() error {
	var errs []error
	if math.IsNaN(c.Ratio) || c.Ratio < 0 || c.Ratio > 1 {
		errs = append(errs, fmt.Errorf("ratio: %v is not in (0, 1]", c.Ratio))
	}
	if math.IsNaN(c.MinPerSecond) || math.IsInf(c.MinPerSecond, 0) || c.MinPerSecond > 1e6 {
		errs = append(errs, fmt.Errorf("min_per_second: %v is not a number up to 1e6", c.MinPerSecond))
	}
	if c.Window < 0 {
		errs = append(errs, fmt.Errorf("window: %v is negative", c.Window))
	} else if c.Window > 0 && c.Window < minTallyWindow {
		errs = append(errs, fmt.Errorf("window: %v is shorter than %v", c.Window, minTallyWindow))
	} else if c.Window > maxRetryWindow {
		errs = append(errs, fmt.Errorf("window: %v is longer than %v", c.Window, maxRetryWindow))
	}
	return errors.Join(errs...)
}

// RetryBudget caps retries to a share of the traffic, as Envoy's and
// Finagle's retry budgets do, so that a failing backend never sees a retry
// storm: every request deposits, every retry withdraws, and a retry is
// allowed only while the retries over the sliding window stay within
// Ratio×requests + MinPerSecond×Window. Time is passed in. Safe for
// concurrent use; no allocation.
type RetryBudget struct {
	cfg      RetryBudgetConfig // defaults applied
	ratioPPM int64
	floorPPM int64 // retries allowed per window whatever the traffic, in millionths

	mu  sync.Mutex
	win tallyWindow // [0] requests, [1] retries
}

// NewRetryBudget returns an empty budget configured by cfg, or every problem
// of cfg.
func NewRetryBudget(cfg RetryBudgetConfig) (*RetryBudget, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Ratio == 0 {
		cfg.Ratio = DefaultRetryRatio
	}
	if cfg.MinPerSecond == 0 {
		cfg.MinPerSecond = DefaultRetryMinPerSecond
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultRetryWindow
	}
	b := &RetryBudget{cfg: cfg, ratioPPM: millionths(cfg.Ratio)}
	if cfg.MinPerSecond > 0 {
		b.floorPPM = millionths(cfg.MinPerSecond * cfg.Window.Seconds())
	}
	b.win.width = cfg.Window / tallyBuckets
	return b, nil
}

// Config returns the budget's configuration with defaults filled in.
func (b *RetryBudget) Config() RetryBudgetConfig { return b.cfg }

// Deposit counts one request at now. Call it once per request the caller
// makes, not per retry.
func (b *RetryBudget) Deposit(now time.Time) {
	b.mu.Lock()
	if s, ok := b.win.advance(now); ok {
		b.win.add(s, 0, 1)
	}
	b.mu.Unlock()
}

// TryRetry reports whether one retry fits in the budget at now and, if it
// does, withdraws it.
func (b *RetryBudget) TryRetry(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.win.advance(now)
	if !ok {
		return false
	}
	if (b.win.total[1]+1)*ppmOne > b.ratioPPM*b.win.total[0]+b.floorPPM {
		return false
	}
	b.win.add(s, 1, 1)
	return true
}

// Backoff returns how long to wait before retry number attempt (1 for the
// first retry), with "full jitter": a uniform pick in [0, min(maxDelay,
// base×2^(attempt-1))], drawn from r, a uniformly random 64-bit number the
// caller supplies (math/rand/v2's Uint64 in production, fixed values in
// tests). An attempt below 1 counts as 1; maxDelay ≤ 0 means no cap; base ≤ 0
// gives 0.
func Backoff(attempt int, base, maxDelay time.Duration, r uint64) time.Duration {
	if base <= 0 {
		return 0
	}
	if maxDelay <= 0 {
		maxDelay = math.MaxInt64
	}
	ceiling := maxDelay
	if attempt < 1 {
		attempt = 1
	}
	if shift := attempt - 1; shift < 63 && base <= maxDelay>>shift {
		ceiling = base << shift
	}
	// The high word of ceiling+1 times r/2^64: uniform in [0, ceiling].
	hi, _ := bits.Mul64(uint64(ceiling)+1, r)
	return time.Duration(hi)
}

// AttemptTimeout returns the timeout of the next attempt of a call whose
// deadline is remaining away: min(remaining, backendTimeout), or remaining
// when backendTimeout ≤ 0. ok is false — do not start the attempt — when
// remaining is not positive or is below floor, the shortest time in which
// the backend can usefully answer.
func AttemptTimeout(remaining, backendTimeout, floor time.Duration) (timeout time.Duration, ok bool) {
	if remaining <= 0 || remaining < floor {
		return 0, false
	}
	if backendTimeout > 0 && backendTimeout < remaining {
		return backendTimeout, true
	}
	return remaining, true
}
