package otel

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// AlertSubjectPrefix starts the subject of alert events:
// jetway.alerts.<rule>.<api or pool>.
const AlertSubjectPrefix = bus.AlertPrefix

// AlertEvent is an alert firing or resolving.
type AlertEvent struct {
	Rule    string    `json:"rule"`
	Kind    string    `json:"kind"`
	Target  string    `json:"target"` // the API, or the pool for no_workers
	State   string    `json:"state"`  // "firing" or "resolved"
	Value   string    `json:"value"`  // what was measured
	Limit   string    `json:"limit"`  // the rule's threshold
	Message string    `json:"message"`
	At      time.Time `json:"at"`
	Webhook string    `json:"-"`
}

// Alerts evaluates alert rules over the cluster's per-second records
// (from every edge, deduplicated by node), the breaker and channel events
// of the pools and the live workers. It keeps each alert's state so that
// an alert is reported once when it fires and once when it resolves.
type Alerts struct {
	mu       sync.Mutex
	seconds  map[int64]map[string]map[string]Record // second → api → node → record
	breakers map[string]string                      // api → last announced state
	sites    map[string]string                      // edge node id → the site its calls go to (ObserveSite)
	channels map[string]channelAlert                // "<api>/<channel>" → its state (ObserveChannel)
	releases map[string]releaseAlert                // api → its release's last announced stage (ObserveRelease)
	firing   map[string]bool                        // rule|target → firing
	// keep is how many seconds of records are kept: the longest window of
	// the rules last evaluated, at least a minute.
	keep int64
	// jobs is the job queues as last read (ObserveJobs), by API tier;
	// deadSeen each tier's dead-letter counts over time, oldest first.
	jobs     map[string]registry.JobQueue
	deadSeen map[string][]deadCount
}

// deadCount is a tier's dead letters as counted at a time.
type deadCount struct {
	at time.Time
	n  uint64
}

// ObserveJobs takes the job queues as read at now (registry.ReadJobQueues).
func (a *Alerts) ObserveJobs(qs []registry.JobQueue, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.jobs = make(map[string]registry.JobQueue, len(qs))
	for _, q := range qs {
		a.jobs[q.API] = q
		h := append(a.deadSeen[q.API], deadCount{now, q.DeadLetters})
		// Keep a day at most, and at most one count a second.
		for len(h) > 1 && (now.Sub(h[0].at) > 24*time.Hour || len(h) > 86400) {
			h = h[1:]
		}
		a.deadSeen[q.API] = h
	}
	for api := range a.deadSeen {
		if _, ok := a.jobs[api]; !ok {
			delete(a.deadSeen, api) // no jobs and no dead letters left
		}
	}
}

// newDead is how many dead letters a tier gained over the window before
// now: the growth from the oldest count in the window (a purge in between
// counts as none).
func (a *Alerts) newDead(api string, now time.Time, w time.Duration) uint64 {
	h := a.deadSeen[api]
	if len(h) == 0 {
		return 0
	}
	first := h[len(h)-1]
	for i := len(h) - 1; i >= 0 && now.Sub(h[i].at) <= w; i-- {
		first = h[i]
	}
	last := h[len(h)-1].n
	if last < first.n {
		return 0
	}
	return last - first.n
}

// Firing lists the alerts firing as this evaluator last judged them, each
// "rule target", sorted.
func (a *Alerts) Firing() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for k, on := range a.firing {
		if on {
			out = append(out, strings.Replace(k, "|", " ", 1))
		}
	}
	slices.Sort(out)
	return out
}

// NewAlerts returns an evaluator with no data.
func NewAlerts() *Alerts {
	return &Alerts{seconds: map[int64]map[string]map[string]Record{}, breakers: map[string]string{}, sites: map[string]string{}, channels: map[string]channelAlert{}, releases: map[string]releaseAlert{}, firing: map[string]bool{}, keep: minKeep,
		jobs: map[string]registry.JobQueue{}, deadSeen: map[string][]deadCount{}}
}

// maxAlertAPIs bounds the APIs kept per second, whatever nodes send.
const maxAlertAPIs = 10000

// minKeep is the fewest seconds of records kept (the default window), and
// maxAhead how far ahead of the receiver's clock a record may be dated
// (the senders' clocks differ a little; a record further out would be
// kept until its second came, a forged one for ever).
const (
	minKeep  = 60
	maxAhead = 60
)

// ObserveRecords takes a node's per-second records. Records arrive over
// NATS and may be forged by any edge: one with a negative count or
// latency, more errors than calls, or an API name no API can have is
// dropped, and at most maxAlertAPIs APIs are kept per second, so a forged
// record can at most skew the alerts of the APIs and seconds it names. now
// is when they arrived: a record older than any rule's window, or dated
// more than maxAhead after now, is dropped, so the records kept are
// bounded by the rules' windows whatever the senders' clocks say.
func (a *Alerts) ObserveRecords(rs []Record, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	oldest, newest := now.Unix()-a.keep, now.Unix()+maxAhead
	for _, r := range rs {
		if r.Pass < 0 || r.Block < 0 || r.Success < 0 || r.Error < 0 || r.Error > r.Pass || r.P99 < 0 || bus.ValidName(r.API) != nil {
			continue
		}
		sec := r.At.Unix()
		if sec < oldest || sec > newest {
			continue
		}
		if apis := a.seconds[sec]; apis != nil && apis[r.API] == nil && len(apis) >= maxAlertAPIs {
			continue
		}
		if a.seconds[sec] == nil {
			a.seconds[sec] = map[string]map[string]Record{}
		}
		if a.seconds[sec][r.API] == nil {
			a.seconds[sec][r.API] = map[string]Record{}
		}
		r.Channels = nil // no rule reads them
		a.seconds[sec][r.API][r.Node] = r
	}
}

// maxSiteNodes bounds the edges whose site is kept (events may be forged).
const maxSiteNodes = 1024

// ObserveSite takes the NATS cluster an edge's calls go to ("primary" or
// "standby"), from its own failover or its event; anything else, or a
// node id that is not a short printable name, is ignored.
func (a *Alerts) ObserveSite(node, site string) {
	if (site != "primary" && site != "standby") || len(node) == 0 || len(node) > 64 ||
		strings.ContainsFunc(node, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.sites[node]; ok || len(a.sites) < maxSiteNodes {
		a.sites[node] = site
	}
}

// KeepSites forgets the sites of the edges live does not name (gone, or
// never there: a forged event's).
func (a *Alerts) KeepSites(live func(node string) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for node := range a.sites {
		if !live(node) {
			delete(a.sites, node)
		}
	}
}

// ObserveBreaker takes a breaker's new state for an API ("open", "closed"
// or "half-open"; anything else is ignored).
func (a *Alerts) ObserveBreaker(api, state string) {
	if state != "open" && state != "closed" && state != "half-open" {
		return
	}
	a.mu.Lock()
	a.breakers[api] = state
	a.mu.Unlock()
}

// window sums an API's calls over the complete seconds in (now-w, now].
func (a *Alerts) window(api string, now time.Time, w time.Duration) (pass, errs int64, p99 time.Duration) {
	end := now.Unix() - 1 // the current second is incomplete
	start := end - int64(w/time.Second) + 1
	var weighted float64
	for sec := start; sec <= end; sec++ {
		for _, r := range a.seconds[sec][api] {
			pass += r.Pass
			errs += r.Error
			weighted += float64(r.P99) * float64(r.Pass)
		}
	}
	if pass > 0 {
		p99 = time.Duration(weighted / float64(pass))
	}
	return pass, errs, p99
}

// Evaluate judges every rule at now and returns the alerts that changed
// state. workersServe reports whether a live worker serves a pool.
func (a *Alerts) Evaluate(now time.Time, rules map[string]*registry.AlertRule, workersServe func(pool string) bool) []AlertEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	// Keep what the longest window needs, nothing older: a day of
	// per-second records of every API and edge would be gigabytes.
	a.keep = minKeep
	for _, r := range rules {
		a.keep = max(a.keep, int64(r.WindowOrDefault()/time.Second)+1)
	}
	for sec := range a.seconds {
		if sec < now.Unix()-a.keep {
			delete(a.seconds, sec)
		}
	}
	names := make([]string, 0, len(rules))
	for n := range rules {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []AlertEvent
	judge := func(r *registry.AlertRule, target string, firing bool, value, limit, msg string) {
		key := r.Name + "|" + target
		if a.firing[key] == firing {
			return // no change: repeats are suppressed
		}
		a.firing[key] = firing
		state := "resolved"
		if firing {
			state = "firing"
		}
		out = append(out, AlertEvent{Rule: r.Name, Kind: r.Kind, Target: target, State: state, Value: value, Limit: limit, Message: msg, At: now, Webhook: r.Webhook})
	}
	for _, n := range names {
		r := rules[n]
		switch r.Kind {
		case registry.AlertNoWorkers:
			serving := workersServe(r.Pool)
			judge(r, r.Pool, !serving, fmt.Sprint(serving), "a live worker", "no live worker serves pool "+r.Pool)
		case registry.AlertOnStandby:
			nodes := slices.Sorted(maps.Keys(a.sites))
			for _, node := range nodes {
				site := a.sites[node]
				judge(r, node, site != "primary", site, "primary", "edge "+node+" sends its calls to its "+site+" nats cluster")
			}
		case registry.AlertBreakerOpened:
			for _, api := range a.targets(r) {
				st := a.breakers[api]
				judge(r, api, st == "open", st, "closed", "the breaker of api "+api+" is "+st)
			}
		case registry.AlertChannelCut:
			for _, target := range a.channelTargets(r.Name, r.API) {
				firing, state, msg := a.judgeChannel(target)
				judge(r, target, firing, state, ChannelAvailable, msg)
			}
		case registry.AlertReleaseRolledBack:
			for _, api := range a.releaseTargets(r.Name, r.API) {
				firing, stage, msg := a.judgeRelease(api)
				judge(r, api, firing, stage, "running", msg)
			}
		case registry.AlertJobQueueAbove, registry.AlertJobAgeAbove, registry.AlertDeadLettersAbove:
			for _, api := range a.jobTargets(r) {
				q := a.jobs[api]
				switch r.Kind {
				case registry.AlertJobQueueAbove:
					judge(r, api, q.Queued > uint64(r.Jobs), fmt.Sprint(q.Queued), fmt.Sprint(r.Jobs),
						fmt.Sprintf("api %s has %d jobs queued (limit %d)", api, q.Queued, r.Jobs))
				case registry.AlertJobAgeAbove:
					age := time.Duration(0)
					if !q.Oldest.IsZero() {
						age = now.Sub(q.Oldest).Round(time.Second)
					}
					limit := time.Duration(r.Age)
					judge(r, api, age > limit, age.String(), limit.String(),
						fmt.Sprintf("the oldest job of api %s was submitted %v ago (limit %v)", api, age, limit))
				default:
					n := a.newDead(api, now, r.WindowOrDefault())
					judge(r, api, n > uint64(r.DeadLetters), fmt.Sprint(n), fmt.Sprint(r.DeadLetters),
						fmt.Sprintf("api %s has %d new dead letters over %v (limit %d)", api, n, r.WindowOrDefault(), r.DeadLetters))
				}
			}
		case registry.AlertSuccessRateBelow, registry.AlertP99Above:
			for _, api := range a.targets(r) {
				pass, errs, p99 := a.window(api, now, r.WindowOrDefault())
				if pass < r.MinCallsOrDefault() {
					continue // too few calls to judge: the state stays
				}
				if r.Kind == registry.AlertP99Above {
					limit := time.Duration(r.Latency)
					judge(r, api, p99 > limit, p99.Round(time.Microsecond).String(), limit.String(),
						fmt.Sprintf("p99 of api %s over %v is %v (limit %v)", api, r.WindowOrDefault(), p99.Round(time.Microsecond), limit))
					continue
				}
				rate := 1 - float64(errs)/float64(pass)
				judge(r, api, rate < r.Threshold, fmt.Sprintf("%.4f", rate), fmt.Sprintf("%.4f", r.Threshold),
					fmt.Sprintf("success rate of api %s over %v is %.2f%% (%d of %d calls failed; limit %.2f%%)", api, r.WindowOrDefault(), rate*100, errs, pass, r.Threshold*100))
			}
		}
	}
	return out
}

// jobTargets are the API tiers a job rule watches: its API (and its other
// tiers that have jobs), or every tier with jobs or dead letters.
func (a *Alerts) jobTargets(r *registry.AlertRule) []string {
	var out []string
	for api := range a.jobs {
		name, _, _ := strings.Cut(api, "@")
		if r.API == "*" || name == r.API {
			out = append(out, api)
		}
	}
	if r.API != "*" && !slices.Contains(out, r.API) {
		out = append(out, r.API) // judged (as empty) so that a firing one resolves
	}
	for k, on := range a.firing { // gone from the queues: judged as empty, so it resolves
		if t, ok := strings.CutPrefix(k, r.Name+"|"); ok && on && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}

// targets are the APIs a rule watches: its API, or every API seen.
func (a *Alerts) targets(r *registry.AlertRule) []string {
	if r.API != "*" {
		return []string{r.API}
	}
	seen := map[string]bool{}
	for _, apis := range a.seconds {
		for api := range apis {
			seen[api] = true
		}
	}
	for api := range a.breakers {
		seen[api] = true
	}
	out := make([]string, 0, len(seen))
	for api := range seen {
		out = append(out, api)
	}
	sort.Strings(out)
	return out
}
