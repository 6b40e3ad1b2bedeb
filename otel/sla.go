package otel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetway-gw/jetway/bus"
)

// SLA records: each edge folds its calls into one record per API per
// minute — calls by outcome, failures by code, refusals by reason, and
// the latency histogram of the minute (histogram.go's buckets, so
// minutes and nodes merge exactly and the quantiles of any merge are
// within the histogram's 1 %) — and stores them in the JetStream stream
// jetway_sla on jetway.sla.<node id>. jetway report reads them back.
//
// The recorder reads the node's cumulative counters (Metrics) once a
// minute and keeps the difference: a call costs nothing more than
// Metrics.Record already does.

// SLA stream names (bus/subjects.go).
const (
	SLASubjectPrefix = bus.SLAPrefix
	SLAStream        = bus.StreamSLA
)

// SLA stream defaults.
const (
	DefaultSLAMaxAge   = 35 * 24 * time.Hour
	DefaultSLAMaxBytes = 8 << 30
)

// SLAWindow is the window availability is judged over: a year has
// 105,120 of them.
const SLAWindow = 5 * time.Minute

// Cause says whose a call's failure or refusal is, for availability.
type Cause uint8

const (
	// CauseRefused: refused on purpose — the caller's request or limits
	// (RATE_LIMITED, UNAUTHENTICATED, FORBIDDEN, BAD_REQUEST,
	// INVALID_REQUEST, PAYLOAD_TOO_LARGE, NO_SANDBOX) or an operator's
	// degrade switch (DEGRADED). Not a call of the SLA.
	CauseRefused Cause = iota
	// CauseBackend: the backend's own failure — its own error status
	// (BACKEND_5XX), an answer the API's classify rule calls a failure
	// (CLASSIFIED), unreachable or broken (BAD_GATEWAY), or its breaker
	// open (CIRCUIT_OPEN). Not counted against the gateway.
	CauseBackend
	// CauseGateway: every other failure — GATEWAY_TIMEOUT, NO_WORKERS,
	// BUS_UNAVAILABLE, BUS_LOST, INTERNAL, OVERLOADED, FAULT_INJECTED,
	// WIRE_VERSION, any other code. Counted against the gateway.
	CauseGateway
)

func (c Cause) String() string {
	return [...]string{CauseRefused: "refused", CauseBackend: "backend", CauseGateway: "gateway"}[c]
}

// FailureCause is whose a failed call is, by its code ("" and
// "BACKEND_5XX": the backend's own error status). The rule is the failure
// drills' (deploy/drills): the backend's when it answered (its own
// status), was unreachable (BAD_GATEWAY) or had its breaker opened;
// anything else the gateway's. GATEWAY_TIMEOUT is the gateway's: the edge
// cannot tell a slow backend from a lost worker by the code.
func FailureCause(code string) Cause {
	switch code {
	case "", "BACKEND_5XX", "CLASSIFIED", "BAD_GATEWAY", "CIRCUIT_OPEN":
		return CauseBackend
	}
	return CauseGateway
}

// BlockCause is whose a blocked call is, by its reason: OVERLOADED (the
// gateway's capacity) is a gateway failure, CIRCUIT_OPEN a backend's,
// anything else refused on purpose.
func BlockCause(reason string) Cause {
	switch reason {
	case "OVERLOADED":
		return CauseGateway
	case "CIRCUIT_OPEN":
		return CauseBackend
	}
	return CauseRefused
}

// Latency is a mergeable latency histogram in histogram.go's buckets.
// In JSON: {"b":[[bucket,count],...],"sum_ns":N}, only buckets with calls.
type Latency struct {
	Counts map[int]int64
	Sum    time.Duration
}

type latencyJSON struct {
	B   [][2]int64 `json:"b,omitempty"`
	Sum int64      `json:"sum_ns,omitempty"`
}

// MarshalJSON writes the buckets with calls, in order.
func (l Latency) MarshalJSON() ([]byte, error) {
	j := latencyJSON{Sum: int64(l.Sum)}
	for _, b := range slices.Sorted(maps.Keys(l.Counts)) {
		if n := l.Counts[b]; n != 0 {
			j.B = append(j.B, [2]int64{int64(b), n})
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON wrote; buckets out of range or
// negative counts are dropped.
func (l *Latency) UnmarshalJSON(b []byte) error {
	var j latencyJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	l.Counts, l.Sum = map[int]int64{}, time.Duration(j.Sum)
	for _, p := range j.B {
		if p[0] >= 0 && p[0] < int64(histBuckets) && p[1] > 0 {
			l.Counts[int(p[0])] += p[1]
		}
	}
	return nil
}

// Add counts one latency.
func (l *Latency) Add(d time.Duration) {
	if l.Counts == nil {
		l.Counts = map[int]int64{}
	}
	l.Counts[bucketOf(d)]++
	l.Sum += d
}

// Merge adds o's latencies.
func (l *Latency) Merge(o Latency) {
	if l.Counts == nil {
		l.Counts = map[int]int64{}
	}
	for b, n := range o.Counts {
		l.Counts[b] += n
	}
	l.Sum += o.Sum
}

// Total is the number of latencies.
func (l Latency) Total() int64 {
	var n int64
	for _, c := range l.Counts {
		n += c
	}
	return n
}

// Quantile is the q-quantile (0 < q ≤ 1) within the histogram's 1 %; 0
// without data.
func (l Latency) Quantile(q float64) time.Duration {
	s := histSnapshot{counts: make([]int64, histBuckets)}
	for b, n := range l.Counts {
		s.counts[b] += n
		s.total += n
	}
	return s.quantile(q)
}

// Mean is the average latency, 0 without data.
func (l Latency) Mean() time.Duration {
	if n := l.Total(); n > 0 {
		return l.Sum / time.Duration(n)
	}
	return 0
}

// SLAStats are an API's calls over some time: mergeable across minutes
// and nodes.
type SLAStats struct {
	Succeeded int64            `json:"ok"`
	Failed    map[string]int64 `json:"failed,omitempty"`  // by code (BACKEND_5XX: the backend's own error status)
	Blocked   map[string]int64 `json:"blocked,omitempty"` // by reason
	Latency   Latency          `json:"lat"`               // every call, as the caller saw it (as /metrics)
}

// Merge adds o's calls.
func (s *SLAStats) Merge(o SLAStats) {
	s.Succeeded += o.Succeeded
	s.Failed = mergeCounts(s.Failed, o.Failed)
	s.Blocked = mergeCounts(s.Blocked, o.Blocked)
	s.Latency.Merge(o.Latency)
}

func mergeCounts(dst, src map[string]int64) map[string]int64 {
	for k, n := range src {
		if n <= 0 {
			continue
		}
		if dst == nil {
			dst = map[string]int64{}
		}
		dst[k] += n
	}
	return dst
}

// Calls are every routed call: succeeded, failed and blocked.
func (s SLAStats) Calls() int64 { return s.Succeeded + sumCounts(s.Failed) + sumCounts(s.Blocked) }

// Errors are the calls that failed or were blocked.
func (s SLAStats) Errors() int64 { return sumCounts(s.Failed) + sumCounts(s.Blocked) }

// Failures counts the failed and blocked calls of a cause.
func (s SLAStats) Failures(c Cause) int64 {
	var n int64
	for code, k := range s.Failed {
		if FailureCause(code) == c {
			n += k
		}
	}
	for r, k := range s.Blocked {
		if BlockCause(r) == c {
			n += k
		}
	}
	return n
}

// SLACalls are the calls availability is judged on: successes and the
// gateway's failures (the backend's failures and calls refused on purpose
// left out).
func (s SLAStats) SLACalls() int64 { return s.Succeeded + s.Failures(CauseGateway) }

// Availability is successes ÷ SLACalls; 1 without calls.
func (s SLAStats) Availability() float64 {
	if n := s.SLACalls(); n > 0 {
		return float64(s.Succeeded) / float64(n)
	}
	return 1
}

func sumCounts(m map[string]int64) int64 {
	var n int64
	for _, k := range m {
		n += k
	}
	return n
}

// SLAAPI is one API's calls of a minute on a node.
type SLAAPI struct {
	API  string `json:"api"`
	Pool string `json:"pool,omitempty"`
	SLAStats
}

// BreakerOpened is a breaker that opened, as its worker announced it
// (jetway.breaker.<pool token>.<api>); every edge that heard it records
// it, and a report counts it once (Key).
type BreakerOpened struct {
	API       string    `json:"api"`
	PoolToken string    `json:"pool_token"` // the subject's: a report keeps only the API's own pool's
	Worker    string    `json:"worker"`
	Gen       uint64    `json:"gen"`
	At        time.Time `json:"at"`
	Reason    string    `json:"reason,omitempty"`
}

// Key identifies an opening across the edges that heard it.
func (b BreakerOpened) Key() string {
	return b.API + "\x00" + b.Worker + "\x00" + strconv.FormatUint(b.Gen, 10) + "\x00" + b.At.UTC().Format(time.RFC3339Nano)
}

// SLAMinute is what an edge stores for a minute: its APIs' calls and the
// breaker openings it heard. A minute with many APIs is stored in parts.
type SLAMinute struct {
	Node     string          `json:"node"`
	Boot     string          `json:"boot"` // the process: a restarted node's minutes are its own
	Minute   time.Time       `json:"minute"`
	Part     int             `json:"part,omitempty"`
	APIs     []SLAAPI        `json:"apis,omitempty"`
	Breakers []BreakerOpened `json:"breakers,omitempty"`
}

// msgID is the minute part's JetStream message id (deduplicated).
func (m SLAMinute) msgID() string {
	return m.Node + "." + m.Boot + "." + strconv.FormatInt(m.Minute.Unix(), 10) + "." + strconv.Itoa(m.Part)
}

// SLAStreamOptions are the stream's settings.
type SLAStreamOptions struct {
	Replicas int           // 1 when 0
	MaxAge   time.Duration // DefaultSLAMaxAge when 0
	MaxBytes int64         // DefaultSLAMaxBytes when 0; the oldest records go first
}

// EnsureSLAStream creates the stream jetway_sla when missing (the admin's
// connection: edges may only publish to it). An existing stream is left
// as it is.
func EnsureSLAStream(ctx context.Context, js jetstream.JetStream, o SLAStreamOptions) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, SLAStream)
	if err == nil {
		return st, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("opening stream %s: %w", SLAStream, err)
	}
	cfg := jetstream.StreamConfig{
		Name:        SLAStream,
		Description: "Jetway SLA records: each edge's calls per API per minute (edges append, the admin reads)",
		Subjects:    []string{SLASubjectPrefix + "*"},
		MaxAge:      cmpOr(o.MaxAge, DefaultSLAMaxAge),
		MaxBytes:    cmpOr(o.MaxBytes, DefaultSLAMaxBytes),
		Discard:     jetstream.DiscardOld,
		Storage:     jetstream.FileStorage,
		Replicas:    max(o.Replicas, 1),
		Duplicates:  10 * time.Minute, // a part sent again after a lost ack
		Compression: jetstream.S2Compression,
		DenyDelete:  true,
	}
	st, err = js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return js.Stream(ctx, SLAStream)
	}
	if err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", SLAStream, err)
	}
	return st, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// SLAOptions configure an SLA recorder.
type SLAOptions struct {
	// JS stores the records: the edge's own connection (its user may
	// publish jetway.sla.*), or serve's admin connection.
	JS jetstream.JetStream
	// Node is the node id (the subject's last token).
	Node string
	// Breakers, if set, is followed for breaker openings
	// (jetway.breaker.>), and for the channel events of every pool
	// (jetway.channels.event.>), which it hands to the Metrics for their
	// channel gauges (Metrics.ObserveChannel): an edge's connection may.
	Breakers *nats.Conn
	// Stream, if set, makes the recorder create the stream when missing
	// (an admin connection only).
	Stream *SLAStreamOptions
	// Backlog bounds the minutes kept while they cannot be stored (NATS
	// or the stream unreachable); the oldest go first. 60 when 0.
	Backlog int
	Log     *slog.Logger
}

// maxPart bounds a stored message (NATS' default max payload is 1 MB).
const maxPart = 256 << 10

// maxBreakersPerMinute bounds the openings kept per minute.
const maxBreakersPerMinute = 1000

// SLARecorder folds a node's Metrics into per-minute records and stores
// them.
type SLARecorder struct {
	m    *Metrics
	o    SLAOptions
	boot string

	mu       sync.Mutex // guards everything below
	prev     map[string]apiSnap
	cur      time.Time // the minute being counted
	breakers []BreakerOpened
	backlog  []SLAMinute
	stopped  bool

	sub     *nats.Subscription
	chanSub *nats.Subscription // the channel events, for m's gauges
	stop    chan struct{}
	done    chan struct{}
}

// apiSnap is an API's cumulative counters when last read.
type apiSnap struct {
	ok      int64
	failed  map[string]int64
	blocked map[string]int64
	counts  []int64
	sum     time.Duration
}

// StartSLARecorder starts recording m's calls per minute. Stop it with
// Stop, at shutdown before the connection drains: it stores the minute
// under way.
func StartSLARecorder(m *Metrics, o SLAOptions) (*SLARecorder, error) {
	if o.JS == nil || o.Node == "" {
		return nil, errors.New("sla recorder: JS and Node are required")
	}
	if o.Backlog <= 0 {
		o.Backlog = 60
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	r := &SLARecorder{m: m, o: o, boot: nuid.Next(), prev: map[string]apiSnap{}, cur: time.Now().UTC().Truncate(time.Minute),
		stop: make(chan struct{}), done: make(chan struct{})}
	if o.Stream != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := EnsureSLAStream(ctx, o.JS, *o.Stream)
		cancel()
		if err != nil {
			o.Log.Warn("sla records: the stream could not be created; they are kept and sent when it can be", "err", err)
		}
	}
	if o.Breakers != nil {
		sub, err := o.Breakers.Subscribe(bus.BreakerPrefix+">", r.observeBreaker)
		if err != nil {
			return nil, fmt.Errorf("sla recorder: following breaker events: %w", err)
		}
		r.sub = sub
		if r.chanSub, err = FollowChannelEvents(o.Breakers, m.ObserveChannel); err != nil {
			_ = sub.Unsubscribe()
			return nil, fmt.Errorf("sla recorder: following channel events: %w", err)
		}
	}
	go r.run()
	return r, nil
}

// observeBreaker keeps a breaker event that opened a breaker.
func (r *SLARecorder) observeBreaker(msg *nats.Msg) {
	var ev struct {
		API    string    `json:"api"`
		Node   string    `json:"node"`
		To     string    `json:"to"`
		Reason string    `json:"reason"`
		At     time.Time `json:"at"`
		Gen    uint64    `json:"gen"`
	}
	if json.Unmarshal(msg.Data, &ev) != nil || ev.To != "open" || ev.API == "" {
		return
	}
	rest := strings.TrimPrefix(msg.Subject, bus.BreakerPrefix)
	tok, api, ok := strings.Cut(rest, ".")
	if !ok || api != ev.API {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.breakers) < maxBreakersPerMinute {
		r.breakers = append(r.breakers, BreakerOpened{API: ev.API, PoolToken: tok, Worker: ev.Node, Gen: ev.Gen, At: ev.At.UTC(), Reason: ev.Reason})
	}
}

func (r *SLARecorder) run() {
	defer close(r.done)
	for {
		now := time.Now()
		next := now.Truncate(time.Minute).Add(time.Minute)
		t := time.NewTimer(next.Sub(now))
		select {
		case <-r.stop:
			t.Stop()
			return
		case now := <-t.C:
			r.closeMinute(now.UTC().Truncate(time.Minute))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			r.send(ctx)
			cancel()
		}
	}
}

// Stop stores the minute under way and what is still unsent, within ctx,
// and stops. It may be called more than once.
func (r *SLARecorder) Stop(ctx context.Context) {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.stopped = true
	r.mu.Unlock()
	close(r.stop)
	<-r.done
	if r.sub != nil {
		_ = r.sub.Unsubscribe()
	}
	if r.chanSub != nil {
		_ = r.chanSub.Unsubscribe()
	}
	r.closeMinute(time.Time{})
	r.send(ctx)
	r.mu.Lock()
	left := len(r.backlog)
	r.mu.Unlock()
	if left > 0 {
		r.o.Log.Warn("sla records not stored at stop", "minutes", left)
	}
}

// closeMinute ends the minute under way: the calls since the last read
// become its records, queued to be sent; the next minute starts at next
// (zero: none, at stop).
func (r *SLARecorder) closeMinute(next time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	minute := r.cur
	if !next.IsZero() {
		if !next.After(r.cur) {
			return // a timer that fired early
		}
		r.cur = next
	}
	apis := r.collect()
	br := r.breakers
	r.breakers = nil
	if len(apis) == 0 && len(br) == 0 {
		return
	}
	r.backlog = append(r.backlog, r.parts(minute, apis, br)...)
	if over := len(r.backlog) - r.o.Backlog*4; over > 0 { // ~4 parts a minute at most, in practice 1
		r.o.Log.Warn("sla records dropped: the stream has been unreachable too long", "parts", over)
		r.backlog = slices.Delete(r.backlog, 0, over)
	}
}

// collect reads every API's counters and returns what changed since the
// last read.
func (r *SLARecorder) collect() []SLAAPI {
	var out []SLAAPI
	for _, a := range *r.m.apis.Load() {
		// The outcomes first, then the histogram: Record counts the
		// latency first, so a call seen in an outcome has its latency.
		cur := apiSnap{ok: a.succeeded.Load(), failed: loadCounts(a.failed), blocked: loadCounts(a.blocked)}
		hs := a.hist.snapshot()
		cur.counts, cur.sum = hs.counts, hs.sum
		p := r.prev[a.name]
		s := SLAStats{Succeeded: cur.ok - p.ok, Failed: diffCounts(cur.failed, p.failed), Blocked: diffCounts(cur.blocked, p.blocked),
			Latency: Latency{Counts: map[int]int64{}, Sum: cur.sum - p.sum}}
		for b, n := range cur.counts {
			if p.counts != nil {
				n -= p.counts[b]
			}
			if n > 0 {
				s.Latency.Counts[b] = n
			}
		}
		r.prev[a.name] = cur
		if s.Calls() > 0 || len(s.Latency.Counts) > 0 {
			out = append(out, SLAAPI{API: a.name, Pool: a.pool, SLAStats: s})
		}
	}
	slices.SortFunc(out, func(a, b SLAAPI) int { return strings.Compare(a.API, b.API) })
	return out
}

func loadCounts(m map[string]*atomic.Int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, c := range m {
		out[k] = c.Load()
	}
	return out
}

func diffCounts(cur, prev map[string]int64) map[string]int64 {
	var out map[string]int64
	for k, n := range cur {
		if d := n - prev[k]; d > 0 {
			if out == nil {
				out = map[string]int64{}
			}
			out[k] = d
		}
	}
	return out
}

// parts splits a minute into messages of at most maxPart bytes.
func (r *SLARecorder) parts(minute time.Time, apis []SLAAPI, br []BreakerOpened) []SLAMinute {
	cur := SLAMinute{Node: r.o.Node, Boot: r.boot, Minute: minute, Breakers: br}
	size := 0
	var out []SLAMinute
	for _, a := range apis {
		b, _ := json.Marshal(a)
		if size+len(b) > maxPart && len(cur.APIs) > 0 {
			out = append(out, cur)
			cur = SLAMinute{Node: r.o.Node, Boot: r.boot, Minute: minute, Part: cur.Part + 1}
			size = 0
		}
		cur.APIs = append(cur.APIs, a)
		size += len(b)
	}
	return append(out, cur)
}

// send stores the queued minutes in order, stopping at the first that
// cannot be (kept for the next minute).
func (r *SLARecorder) send(ctx context.Context) {
	r.mu.Lock()
	queue := slices.Clone(r.backlog)
	r.mu.Unlock()
	sent := 0
	for _, m := range queue {
		b, err := json.Marshal(m)
		if err == nil {
			_, err = r.o.JS.Publish(ctx, SLASubjectPrefix+r.o.Node, b, jetstream.WithMsgID(m.msgID()))
			if errors.Is(err, jetstream.ErrNoStreamResponse) && r.o.Stream != nil {
				if _, cerr := EnsureSLAStream(ctx, r.o.JS, *r.o.Stream); cerr == nil {
					_, err = r.o.JS.Publish(ctx, SLASubjectPrefix+r.o.Node, b, jetstream.WithMsgID(m.msgID()))
				}
			}
		}
		if err != nil {
			r.o.Log.Debug("sla records not stored yet", "err", err, "queued", len(queue)-sent)
			break
		}
		sent++
	}
	r.mu.Lock()
	r.backlog = r.backlog[sent:]
	r.mu.Unlock()
}

// ErrNoSLAStream is returned by ReadSLA when no edge has stored a record
// yet (or the stream was deleted).
var ErrNoSLAStream = errors.New("no SLA records: the stream " + SLAStream + " does not exist")

// ReadSLA returns the minutes stored for [from, until), each part once.
// It reads from the first record stored at from (a minute is stored after
// it ends) to the end of the stream, or to records stored an hour after
// until (minutes held back by an outage are stored late).
func ReadSLA(ctx context.Context, js jetstream.JetStream, from, until time.Time) ([]SLAMinute, error) {
	st, err := js.Stream(ctx, SLAStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoSLAStream
	}
	if err != nil {
		return nil, fmt.Errorf("opening the SLA records: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the SLA records: %w", err)
	}
	if info.State.Msgs == 0 || info.State.LastTime.Before(from) {
		return nil, nil
	}
	start := from
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy,
		OptStartTime: &start, InactiveThreshold: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("reading the SLA records: %w", err)
	}
	stopAt := until.Add(time.Hour)
	seen := map[string]bool{}
	var out []SLAMinute
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading the SLA records: %w (narrow the period)", err)
		}
		batch, err := cons.Fetch(512, jetstream.FetchMaxWait(250*time.Millisecond))
		if err != nil {
			return nil, fmt.Errorf("reading the SLA records: %w", err)
		}
		n, pending, past := 0, uint64(1), false
		for msg := range batch.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				continue
			}
			pending = md.NumPending
			if md.Timestamp.After(stopAt) {
				past = true
				continue
			}
			var m SLAMinute
			if json.Unmarshal(msg.Data(), &m) != nil {
				continue
			}
			// A node speaks only for itself: jetway.sla.<node id>.
			if m.Node != strings.TrimPrefix(msg.Subject(), SLASubjectPrefix) || m.Minute.Before(from) || !m.Minute.Before(until) {
				continue
			}
			if id := m.msgID(); !seen[id] {
				seen[id] = true
				out = append(out, m)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("reading the SLA records: %w", err)
		}
		if n == 0 || pending == 0 || past {
			return out, nil
		}
	}
}
