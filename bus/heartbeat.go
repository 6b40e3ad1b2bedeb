package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
)

// Heartbeats. Every edge and worker publishes a Heartbeat on
// HeartbeatPrefix+<role>.<id> every period (DefaultHeartbeatPeriod); a node
// silent for DeadAfter periods is dead, and a node that stops cleanly sends
// a last beat with Stopping set so that listeners drop it at once. A Beater
// publishes, a Tracker keeps the live set, Discover is a one-shot listen for
// the CLI.
const (
	// DefaultHeartbeatPeriod is how often nodes beat.
	DefaultHeartbeatPeriod = time.Second
	// DeadAfter is how many periods of silence make a node dead.
	DeadAfter = 3
	// MaxTrackedNodes bounds a Tracker's table; past it the node heard
	// from least recently is dropped.
	MaxTrackedNodes = 10000
	// maxHeartbeatSize bounds a heartbeat message a Tracker accepts, so the
	// table's memory stays bounded whatever peers send.
	maxHeartbeatSize = 64 << 10
)

// HeartbeatSubject is the subject a node with the given role and id beats
// on. Both must be single subject tokens (see validToken).
func HeartbeatSubject(role, id string) string { return HeartbeatPrefix + role + "." + id }

// Heartbeat is what a node says about itself every period.
type Heartbeat struct {
	ID       string    `json:"id"`              // node id, a nuid
	Role     string    `json:"role"`            // serve, edge or worker
	Pools    []string  `json:"pools,omitempty"` // pools a worker serves
	Version  string    `json:"version,omitempty"`
	Wire     int       `json:"wire,omitempty"`  // the wire version the node writes and reads up to; absent: 1
	Host     string    `json:"host,omitempty"`  // hostname
	Admin    string    `json:"admin,omitempty"` // admin listener address
	Started  time.Time `json:"started"`
	Uptime   float64   `json:"uptime_seconds"` // At - Started, in seconds
	InFlight int64     `json:"in_flight"`      // calls being served now
	APIs     int       `json:"apis"`           // APIs the node serves
	At       time.Time `json:"at"`             // when the beat was sent (sender's clock)
	Stopping bool      `json:"stopping,omitempty"`
	// Breakers are the API tiers whose breaker is not closed on the node
	// (a worker's), and Alerts the alerts firing as the node judges them
	// (the serve or edge node that judges): what the console shows. The
	// node's word, at most MaxHeartbeatList each.
	Breakers []string `json:"breakers_open,omitempty"`
	Alerts   []string `json:"alerts_firing,omitempty"`
	// Site is the NATS cluster an edge with a standby (--nats-standby)
	// sends its calls to now, "primary" or "standby"; absent without one.
	Site string `json:"site,omitempty"`
}

// MaxHeartbeatList bounds Heartbeat.Breakers and Heartbeat.Alerts.
const MaxHeartbeatList = 64

// UptimeDuration is Uptime as a time.Duration.
func (h Heartbeat) UptimeDuration() time.Duration {
	return time.Duration(h.Uptime * float64(time.Second))
}

// validToken reports whether s can be one token of a heartbeat subject:
// letters, digits, '_' and '-', at most MaxNameLen long.
func validToken(s string) bool {
	return ValidName(s) == nil && !strings.Contains(s, ".")
}

// Beater publishes one node's heartbeats. Create it with NewHeartbeat and
// run it with Run.
type Beater struct {
	nc      *nats.Conn
	hb      Heartbeat
	subject string
	period  time.Duration
	status  func() (inFlight int64, apis int)
	detail  func(hb *Heartbeat) // sets Breakers and Alerts; nil: none
	running atomic.Bool
}

// Detail has f set a beat's Breakers and Alerts at each beat (call before
// Run; f must be quick and safe to call from another goroutine).
func (b *Beater) Detail(f func(hb *Heartbeat)) { b.detail = f }

// NewHeartbeat prepares the heartbeats of the node described by hb: ID (a
// new nuid when empty), Role, Pools, Version, Host (os.Hostname() when
// empty), Admin and Started (now when zero). Uptime, At, InFlight, APIs and
// Stopping are filled at each beat; status, if not nil, is called at each
// beat for the in-flight count and the number of APIs served, and must be
// quick and safe to call from another goroutine. period <= 0 means
// DefaultHeartbeatPeriod.
//
// It returns an error if nc is nil or the role or id is not a single
// subject token of letters, digits, '_' and '-'.
func NewHeartbeat(nc *nats.Conn, hb Heartbeat, period time.Duration, status func() (inFlight int64, apis int)) (*Beater, error) {
	if nc == nil {
		return nil, errors.New("heartbeat: nil nats connection")
	}
	if hb.ID == "" {
		hb.ID = nuid.Next()
	}
	if !validToken(hb.Role) {
		return nil, fmt.Errorf("heartbeat: role %q must be one token of letters, digits, '_' and '-'", hb.Role)
	}
	if !validToken(hb.ID) {
		return nil, fmt.Errorf("heartbeat: id %q must be one token of letters, digits, '_' and '-'", hb.ID)
	}
	if hb.Host == "" {
		hb.Host, _ = os.Hostname()
	}
	if hb.Started.IsZero() {
		hb.Started = time.Now()
	}
	hb.Started = hb.Started.UTC()
	hb.Pools = slices.Clone(hb.Pools)
	if period <= 0 {
		period = DefaultHeartbeatPeriod
	}
	return &Beater{nc: nc, hb: hb, subject: HeartbeatSubject(hb.Role, hb.ID), period: period, status: status}, nil
}

// ID is the node id the Beater beats with.
func (b *Beater) ID() string { return b.hb.ID }

// Run beats at once and then every period until ctx ends; then it publishes
// a last beat with Stopping set, flushes it (waiting at most a period or a
// second, whichever is less) and returns nil. A beat that cannot be
// published (NATS down) is skipped: it only ages the listeners' view. Run
// returns an error only if the Beater is already running.
func (b *Beater) Run(ctx context.Context) error {
	if !b.running.CompareAndSwap(false, true) {
		return errors.New("heartbeat: already running")
	}
	defer b.running.Store(false)
	_ = b.beat(false) // a lost beat is sent again within a period
	t := time.NewTicker(b.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if b.beat(true) == nil {
				_ = b.nc.FlushTimeout(min(b.period, time.Second))
			}
			return nil
		case <-t.C:
			_ = b.beat(false)
		}
	}
}

func (b *Beater) beat(stopping bool) error {
	hb := b.hb
	now := time.Now().UTC()
	hb.At = now
	hb.Uptime = math.Round(now.Sub(hb.Started).Seconds()*1000) / 1000
	if b.status != nil {
		hb.InFlight, hb.APIs = b.status()
	}
	if b.detail != nil {
		b.detail(&hb)
		hb.Breakers = hb.Breakers[:min(len(hb.Breakers), MaxHeartbeatList)]
		hb.Alerts = hb.Alerts[:min(len(hb.Alerts), MaxHeartbeatList)]
	}
	hb.Stopping = stopping
	data, err := json.Marshal(hb)
	if err != nil {
		return err
	}
	return b.nc.Publish(b.subject, data)
}

// Tracker listens to every node's heartbeats and keeps the live set: a
// node is live from its first beat until it has been silent for DeadAfter
// periods (judged by when this process received its beats, not by the
// sender's clock) or it sent its Stopping beat. The table holds at most
// MaxTrackedNodes nodes. A Tracker is safe for concurrent use.
type Tracker struct {
	nc     *nats.Conn
	period time.Duration
	max    int

	mu    sync.Mutex
	sub   *nats.Subscription
	nodes map[string]trackedNode // by id
}

type trackedNode struct {
	hb   Heartbeat
	seen time.Time // when the last beat arrived here
}

// NewTracker returns a Tracker for nodes beating every period (<= 0 means
// DefaultHeartbeatPeriod). It listens only after Start.
func NewTracker(nc *nats.Conn, period time.Duration) *Tracker {
	if period <= 0 {
		period = DefaultHeartbeatPeriod
	}
	return &Tracker{nc: nc, period: period, max: MaxTrackedNodes, nodes: map[string]trackedNode{}}
}

// Start subscribes to every heartbeat and returns once the subscription is
// registered with the server. It returns an error if the Tracker is already
// started, or the subscription fails (ErrNotConnected for a nil conn).
func (t *Tracker) Start() error {
	if t.nc == nil {
		return ErrNotConnected
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sub != nil {
		return errors.New("heartbeat tracker: already started")
	}
	sub, err := t.nc.Subscribe(HeartbeatPrefix+">", t.receive)
	if err != nil {
		return fmt.Errorf("subscribing to heartbeats: %w", err)
	}
	// A flush makes the subscription known to the server before Start
	// returns; while NATS is down it would only wait, and the
	// subscription is replayed on reconnect anyway.
	if t.nc.IsConnected() {
		_ = t.nc.FlushTimeout(2 * time.Second)
	}
	t.sub = sub
	return nil
}

// Stop unsubscribes. The nodes heard so far stay readable.
func (t *Tracker) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sub != nil {
		_ = t.sub.Unsubscribe()
		t.sub = nil
	}
}

func (t *Tracker) receive(m *nats.Msg) {
	if len(m.Data) > maxHeartbeatSize {
		return
	}
	var hb Heartbeat
	if json.Unmarshal(m.Data, &hb) != nil || !validToken(hb.Role) || !validToken(hb.ID) || m.Subject != HeartbeatSubject(hb.Role, hb.ID) {
		return
	}
	t.observe(boundHeartbeat(hb), time.Now())
}

// Bounds of a heartbeat's fields, whatever a peer sends.
const (
	maxHeartbeatPools = 256
	maxHeartbeatText  = 256
)

// boundHeartbeat bounds what a received beat may claim: a role may beat
// only under its own role (NATS permissions), but any node of that role may
// forge one. Pools are valid names, at most maxHeartbeatPools; texts are cut
// to maxHeartbeatText bytes and made printable; counts are not negative.
func boundHeartbeat(hb Heartbeat) Heartbeat {
	hb.Wire = min(max(hb.Wire, 0), WireVersion) // a version this node does not know says nothing more
	pools := make([]string, 0, min(len(hb.Pools), maxHeartbeatPools))
	for _, p := range hb.Pools {
		if len(pools) == maxHeartbeatPools {
			break
		}
		if ValidName(p) == nil {
			pools = append(pools, p)
		}
	}
	hb.Pools = pools
	cut := func(s string) string {
		if len(s) > maxHeartbeatText {
			s = s[:maxHeartbeatText]
		}
		return printable(s)
	}
	hb.Version, hb.Host, hb.Admin = cut(hb.Version), cut(hb.Host), cut(hb.Admin)
	// Only the roles that hold them speak of breakers (a worker's, or
	// serve's) and of alerts (the serve or edge node judging them): a
	// forged worker beat cannot make an alert fire on a screen.
	list := func(keep bool, l []string) []string {
		if !keep {
			return nil
		}
		out := make([]string, 0, min(len(l), MaxHeartbeatList))
		for _, s := range l[:min(len(l), MaxHeartbeatList)] {
			out = append(out, cut(s))
		}
		return out
	}
	hb.Breakers = list(hb.Role == UserWorker || hb.Role == "serve", hb.Breakers)
	hb.Alerts = list(hb.Role == UserEdge || hb.Role == "serve", hb.Alerts)
	// A site is an edge's (or serve's), and one of the two.
	if (hb.Site != "primary" && hb.Site != "standby") || (hb.Role != UserEdge && hb.Role != "serve") {
		hb.Site = ""
	}
	hb.InFlight, hb.APIs = max(hb.InFlight, 0), max(hb.APIs, 0)
	if !(hb.Uptime >= 0) || math.IsInf(hb.Uptime, 0) { // NaN too
		hb.Uptime = 0
	}
	return hb
}

// printable returns s with every control character (C0, DEL, C1: the
// terminal escapes ESC and CSI among them) and every invalid UTF-8 byte
// replaced by '?': a beat's texts end up on an operator's terminal
// (`jetway nodes`), and any node of a role may forge its role's beats.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}

// observe records a beat received at now.
func (t *Tracker) observe(hb Heartbeat, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if hb.Stopping {
		delete(t.nodes, hb.ID)
		return
	}
	if _, known := t.nodes[hb.ID]; !known && len(t.nodes) >= t.max {
		t.pruneLocked(now)
		if len(t.nodes) >= t.max {
			oldest, first := "", true
			var at time.Time
			for id, n := range t.nodes {
				if first || n.seen.Before(at) {
					oldest, at, first = id, n.seen, false
				}
			}
			delete(t.nodes, oldest)
		}
	}
	t.nodes[hb.ID] = trackedNode{hb: hb, seen: now}
}

func (t *Tracker) deadLocked(n trackedNode, now time.Time) bool {
	return now.Sub(n.seen) > DeadAfter*t.period
}

func (t *Tracker) pruneLocked(now time.Time) {
	for id, n := range t.nodes {
		if t.deadLocked(n, now) {
			delete(t.nodes, id)
		}
	}
}

// Nodes returns the last heartbeat of every node live at now, sorted by
// role, then id. It never returns nil.
func (t *Tracker) Nodes(now time.Time) []Heartbeat {
	t.mu.Lock()
	t.pruneLocked(now)
	out := make([]Heartbeat, 0, len(t.nodes))
	for _, n := range t.nodes {
		hb := n.hb
		hb.Pools = slices.Clone(hb.Pools)
		out = append(out, hb)
	}
	t.mu.Unlock()
	sortHeartbeats(out)
	return out
}

// Live counts the nodes of a role live at now; role "" counts every node.
func (t *Tracker) Live(role string, now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, tn := range t.nodes {
		if (role == "" || tn.hb.Role == role) && !t.deadLocked(tn, now) {
			n++
		}
	}
	return n
}

// Serving reports whether a worker serving pool (or a serve node, which
// serves every pool) was live and not stopping at now: a no-responders
// answer for one of the pool's APIs is then a moment's gap — its workers
// reconnecting to another NATS node — rather than a pool with no worker.
func (t *Tracker) Serving(pool string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tn := range t.nodes {
		if tn.hb.Stopping || t.deadLocked(tn, now) {
			continue
		}
		if tn.hb.Role == "serve" || (tn.hb.Role == "worker" && slices.Contains(tn.hb.Pools, pool)) {
			return true
		}
	}
	return false
}

// WireFloor is the lowest wire version among the workers (and serve
// nodes) live at now, ok false when there are none. A beat without a
// version comes from a release that reads only version 1.
func (t *Tracker) WireFloor(now time.Time) (v int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tn := range t.nodes {
		if (tn.hb.Role != "worker" && tn.hb.Role != "serve") || t.deadLocked(tn, now) {
			continue
		}
		w := max(tn.hb.Wire, WireMinVersion)
		if !ok || w < v {
			v, ok = w, true
		}
	}
	return v, ok
}

// ServeHTTP answers with Nodes(time.Now()) as a JSON array, the same
// document `jetway nodes --json` prints.
func (t *Tracker) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = WriteNodesJSON(w, t.Nodes(time.Now()))
}

// WriteNodesJSON writes nodes as an indented JSON array ("[]" when empty).
func WriteNodesJSON(w io.Writer, nodes []Heartbeat) error {
	if nodes == nil {
		nodes = []Heartbeat{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(nodes)
}

func sortHeartbeats(hs []Heartbeat) {
	slices.SortFunc(hs, func(a, b Heartbeat) int {
		if c := strings.Compare(a.Role, b.Role); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// Discover listens to heartbeats for 1.2 periods — long enough to hear
// every live node beating at that period at least once — and returns the
// nodes heard, sorted by role, then id (never nil). Nodes that sent their
// Stopping beat meanwhile are left out. If ctx ends first it returns what
// it heard with ctx.Err(); it returns the Tracker's Start error if it
// cannot subscribe.
func Discover(ctx context.Context, nc *nats.Conn, period time.Duration) ([]Heartbeat, error) {
	t := NewTracker(nc, period)
	if err := t.Start(); err != nil {
		return nil, err
	}
	defer t.Stop()
	timer := time.NewTimer(t.period + t.period/5)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return t.Nodes(time.Now()), ctx.Err()
	case <-timer.C:
		return t.Nodes(time.Now()), nil
	}
}
