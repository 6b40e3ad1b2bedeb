// Package resilience holds Jetway's traffic-governance logic — rate
// limiters, concurrency limits, circuit breakers and retry budgets — as pure
// functions of time and inputs: no I/O, no goroutines, no timers and no
// global state. Every call that depends on the clock takes the time as an
// argument (now time.Time), so tests drive it with plain time values and
// never sleep. The edge and the workers wire it in: they read the settings
// from the registry, build the values here, and turn their answers into
// HTTP statuses, NATS events and sleeps.
//
// Rate limiting (ratelimit.go, keyed.go, concurrency.go) follows Alibaba
// Sentinel's flow control: a RuleConfig picks a behaviour — reject (a
// sliding window of sub-buckets, like Sentinel's LeapArray), warmup (a
// Guava SmoothWarmingUp ramp after idle), queue (a leaky bucket that paces
// calls and tells the caller how long to wait) or concurrency (a cap on calls
// in flight). NewLimiter builds one Limiter for a rule; NewKeyed builds one
// limiter per key value (app, client IP, header, ...) in a bounded LRU table,
// with per-value exceptions for hot values. Every limiter answers a Decision:
// allowed now, allowed after a wait, or refused with a Retry-After.
//
// Circuit breakers (Breaker, breaker.go) and retry budgets (RetryBudget,
// retry.go) protect the backends from the workers' side. ClusterLimiter
// (cluster.go) keeps one limit across all live edges from the reports they
// exchange, and LastGood (lastgood.go) keeps the last good responses that
// fallbacks and degrade switches answer with.
//
// Kept and KeptMap (keep.go) keep such values across registry changes for
// as long as the settings they were built from are unchanged; they are
// only touched by the registry update that builds them.
//
// Every other type here is safe for concurrent use; each holds a small
// mutex around a few arithmetic operations and does not allocate on its
// hot path.
package resilience
