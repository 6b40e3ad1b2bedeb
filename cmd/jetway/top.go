package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/otel"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/workers"
)

const topUsage = `Usage: jetway top [--nats URL] [--once] [--interval 1s]
       jetway metric API [--nats URL] [--history 1m] [--seconds 10]

top shows a live table of every API across the cluster, refreshed each
second: calls per second, blocked per second, error %, average, p50 (the
nodes' weighted by calls) and p99 latency (the slowest node's), the breaker state last announced by the pool,
and whether the API is degraded. Under an API with a channel set, a row
per channel (↳) shows, over the refresh interval, its calls per second,
its share of the API's calls, its error % and, in BREAKER, its state as
the pool's controller last announced it. It reads what every edge
publishes each second on jetway.metrics.>, the breaker events on
jetway.breaker.> and the channel events on jetway.channels.event.>.

metric prints an API's per-second records from every node: first those
of the last --history (what the edges keep, up to an hour), then each new
one as it arrives (timestamp_ms|api|node|pass|block|success|error|avg_ms|p99_ms).

Flags:
`

// clusterView folds the nodes' per-second records into one row per API.
type clusterView struct {
	mu       sync.Mutex
	seconds  map[int64]map[string]map[string]otel.Record // second → api → node → record
	breakers map[string]string                           // api → last announced state
	channels map[string]map[string]otel.ChannelEvent     // api → channel → last announced change
}

// observeChannel keeps a channel's last announced change (bounded: a
// channel set has at most 16 channels).
func (v *clusterView) observeChannel(ev otel.ChannelEvent) {
	v.mu.Lock()
	defer v.mu.Unlock()
	chans := v.channels[ev.API]
	if _, ok := chans[ev.Channel]; !ok && (len(chans) >= 32 || len(v.channels) >= 4096) {
		return
	}
	if chans == nil {
		chans = map[string]otel.ChannelEvent{}
		v.channels[ev.API] = chans
	}
	chans[ev.Channel] = ev
}

func (v *clusterView) add(rs []otel.Record) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, r := range rs {
		sec := r.At.Unix()
		if v.seconds[sec] == nil {
			v.seconds[sec] = map[string]map[string]otel.Record{}
		}
		if v.seconds[sec][r.API] == nil {
			v.seconds[sec][r.API] = map[string]otel.Record{}
		}
		v.seconds[sec][r.API][r.Node] = r // a node's record of a second counts once
	}
	for sec := range v.seconds { // keep a minute
		if sec < time.Now().Unix()-60 {
			delete(v.seconds, sec)
		}
	}
}

type topRow struct {
	api                        string
	pass, block, errs, success int64
	avg, p50, p99              time.Duration
	nodes                      int
	channels                   []topChannel // of an API with a channel set
}

// topChannel is a channel's calls over the last seconds, and its state.
type topChannel struct {
	name       string
	ok, failed int64
	state      string // "" when none was heard
	share      float64
}

// rows sums the last complete second across nodes, and the calls by
// channel over the last n seconds.
func (v *clusterView) rows(n int) (int64, []topRow) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var latest int64
	for sec := range v.seconds {
		latest = max(latest, sec)
	}
	var out []topRow
	for api, rs := range v.seconds[latest] {
		row := topRow{api: api, nodes: len(rs)}
		var weighted, weighted50 time.Duration
		for _, r := range rs {
			row.pass += r.Pass
			row.block += r.Block
			row.errs += r.Error
			row.success += r.Success
			weighted += r.Avg * time.Duration(r.Pass+r.Block)
			weighted50 += r.P50 * time.Duration(r.Pass+r.Block)
			row.p99 = max(row.p99, r.P99)
		}
		if n := row.pass + row.block; n > 0 {
			row.avg = weighted / time.Duration(n)
			row.p50 = weighted50 / time.Duration(n) // the nodes' p50s, weighted by calls
		}
		row.channels = v.channelRows(api, latest, n)
		out = append(out, row)
	}
	slices.SortFunc(out, func(a, b topRow) int { return strings.Compare(a.api, b.api) })
	return latest, out
}

// channelRows sums an API's calls by channel across nodes over the n
// seconds up to latest, with every channel heard of in events (a cut one
// takes no calls), by name. v.mu is held.
func (v *clusterView) channelRows(api string, latest int64, n int) []topChannel {
	byName := map[string]*topChannel{}
	get := func(name string) *topChannel {
		if byName[name] == nil {
			byName[name] = &topChannel{name: name}
		}
		return byName[name]
	}
	for sec := latest - int64(n) + 1; sec <= latest; sec++ {
		for _, r := range v.seconds[sec][api] {
			for _, c := range r.Channels {
				if c.OK < 0 || c.Failed < 0 || len(byName) >= 64 && byName[c.Channel] == nil {
					continue
				}
				tc := get(c.Channel)
				tc.ok += c.OK
				tc.failed += c.Failed
			}
		}
	}
	for name, ev := range v.channels[api] {
		tc := get(name)
		tc.state, tc.share = ev.To, ev.Share
	}
	out := make([]topChannel, 0, len(byName))
	for _, tc := range byName {
		out = append(out, *tc)
	}
	slices.SortFunc(out, func(a, b topChannel) int { return strings.Compare(a.name, b.name) })
	return out
}

// channelState is how top shows a channel's state: the state, and the
// share a ramping channel takes.
func (c topChannel) channelState() string {
	switch {
	case c.state == "":
		return "-"
	case c.state == otel.ChannelRamping:
		return fmt.Sprintf("%s %g%%", c.state, math.Round(c.share*1000)/10)
	}
	return c.state
}

func cmdTop(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := natsFlag(fs)
	once := fs.Bool("once", false, "print one table after --interval and exit (for scripts)")
	interval := fs.Duration("interval", time.Second, "refresh period")
	fs.Usage = func() { fmt.Fprint(stderr, topUsage); fs.PrintDefaults() }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: jetway top takes no arguments", errUsage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	nc, err := natsURL.connect(ctx, "jetway-top")
	if err != nil {
		return err
	}
	defer nc.Close()
	v := &clusterView{seconds: map[int64]map[string]map[string]otel.Record{}, breakers: map[string]string{},
		channels: map[string]map[string]otel.ChannelEvent{}}
	if _, err := nc.Subscribe(otel.MetricsSubjectPrefix+">", func(m *nats.Msg) {
		var rs []otel.Record
		if json.Unmarshal(m.Data, &rs) == nil {
			v.add(rs)
		}
	}); err != nil {
		return err
	}
	if _, err := nc.Subscribe(workers.BreakerSubjectPrefix+">", func(m *nats.Msg) {
		var ev workers.BreakerEvent
		if json.Unmarshal(m.Data, &ev) == nil {
			v.mu.Lock()
			v.breakers[ev.API] = ev.To
			v.mu.Unlock()
		}
	}); err != nil {
		return err
	}
	if _, err := otel.FollowChannelEvents(nc, v.observeChannel); err != nil {
		return err
	}
	degraded := func() map[string]bool { return degradedAPIs(ctx, nc) }
	secs := max(int(math.Round(interval.Seconds())), 1) // the channels' rows are over the interval
	t := time.NewTicker(*interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		sec, rows := v.rows(secs)
		if !*once {
			fmt.Fprint(stdout, "\033[H\033[2J") // clear the terminal
		}
		deg := degraded()
		fmt.Fprintf(stdout, "jetway top — second %s — %d APIs with traffic\n\n", time.Unix(sec, 0).UTC().Format("15:04:05"), len(rows))
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "API\tQPS\tSHARE\tBLOCKED/S\tERROR %\tAVG\tP50\tP99\tNODES\tBREAKER\tDEGRADED")
		for _, r := range rows {
			errPct := 0.0
			if r.pass > 0 {
				errPct = 100 * float64(r.errs) / float64(r.pass)
			}
			v.mu.Lock()
			br := v.breakers[r.api]
			v.mu.Unlock()
			if br == "" {
				br = "-"
			}
			dg := "-"
			if deg[r.api] {
				dg = "yes"
			}
			fmt.Fprintf(tw, "%s\t%d\t-\t%d\t%.1f\t%v\t%v\t%v\t%d\t%s\t%s\n", r.api, r.pass+r.block, r.block, errPct,
				r.avg.Round(time.Microsecond), r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.nodes, br, dg)
			writeChannelRows(tw, r.channels, secs)
		}
		_ = tw.Flush()
		if *once {
			return nil
		}
	}
}

// writeChannelRows writes an API's rows by channel: calls per second over
// secs seconds, share of the API's calls answered by a channel, error %,
// state.
func writeChannelRows(w io.Writer, chans []topChannel, secs int) {
	var total int64
	for _, c := range chans {
		total += c.ok + c.failed
	}
	for _, c := range chans {
		calls := c.ok + c.failed
		share, errPct := 0.0, "-"
		if total > 0 {
			share = 100 * float64(calls) / float64(total)
		}
		if calls > 0 {
			errPct = strconv.FormatFloat(100*float64(c.failed)/float64(calls), 'f', 1, 64)
		}
		qps := strconv.FormatFloat(math.Round(10*float64(calls)/float64(secs))/10, 'f', -1, 64)
		fmt.Fprintf(w, "  ↳ %s\t%s\t%.1f%%\t-\t%s\t-\t-\t-\t-\t%s\t-\n", c.name, qps, share, errPct, c.channelState())
	}
}

// degradedAPIs lists the APIs whose degrade switch is on.
func degradedAPIs(ctx context.Context, nc *nats.Conn) map[string]bool {
	out := map[string]bool{}
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	c, err := registry.NewClient(cctx, nc, registry.BucketOptions{})
	if err != nil {
		return out
	}
	es, err := c.ListDegrade(cctx)
	if err != nil {
		return out
	}
	for _, e := range es {
		if e.Err == nil && e.Value.On {
			out[e.Value.API] = true
		}
	}
	return out
}

func cmdMetric(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway metric", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := natsFlag(fs)
	seconds := fs.Int("seconds", 10, "how many seconds to follow new records (0: until Ctrl-C)")
	history := fs.Duration("history", time.Minute, "print the records of this recent past first (at most 1h; 0: none)")
	fs.Usage = func() { fmt.Fprint(stderr, topUsage); fs.PrintDefaults() }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: jetway metric takes one API name", errUsage)
	}
	api := pos[0]
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *seconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*seconds)*time.Second+500*time.Millisecond)
		defer cancel()
	}
	nc, err := natsURL.connect(ctx, "jetway-metric")
	if err != nil {
		return err
	}
	defer nc.Close()
	// Follow first, print later: a record that arrives while the history
	// is gathered is held back, then printed unless the history had it.
	var mu sync.Mutex
	var held []otel.Record
	following := false
	printed := map[string]time.Time{} // node -> newest record printed
	emit := func(r otel.Record) {
		if !r.At.After(printed[r.Node]) {
			return
		}
		printed[r.Node] = r.At
		fmt.Fprintf(stdout, "%d|%s|%s|%d|%d|%d|%d|%.3f|%.3f\n", r.At.UnixMilli(), r.API, r.Node, r.Pass, r.Block, r.Success, r.Error,
			float64(r.Avg)/1e6, float64(r.P99)/1e6)
	}
	if _, err := nc.Subscribe(otel.MetricsSubjectPrefix+">", func(m *nats.Msg) {
		var rs []otel.Record
		if json.Unmarshal(m.Data, &rs) != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range rs {
			switch {
			case r.API != api:
			case following:
				emit(r)
			default:
				held = append(held, r)
			}
		}
	}); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "# timestamp_ms|api|node|pass|block|success|error|avg_ms|p99_ms")
	past, err := metricHistory(ctx, nc, api, *history)
	if err != nil {
		return err
	}
	mu.Lock()
	for _, r := range append(past, held...) {
		emit(r)
	}
	held, following = nil, true
	mu.Unlock()
	<-ctx.Done()
	return nil
}

// metricHistory asks every edge for an API's records of the last d and
// returns them oldest first. Edges answer at once; it gathers answers until
// none has come for a moment.
func metricHistory(ctx context.Context, nc *nats.Conn, api string, d time.Duration) ([]otel.Record, error) {
	if d <= 0 {
		return nil, nil
	}
	q, _ := json.Marshal(otel.MetricsQuery{API: api, Seconds: int(d.Seconds())})
	var out []otel.Record
	if _, err := bus.AskEveryNode(ctx, nc, otel.MetricsQuerySubject, q, nil, func(b []byte) string {
		var rs []otel.Record
		if json.Unmarshal(b, &rs) == nil {
			out = append(out, rs...)
		}
		return ""
	}); err != nil {
		return nil, fmt.Errorf("asking for %s's records: %w", api, err)
	}
	slices.SortStableFunc(out, func(a, b otel.Record) int { return a.At.Compare(b.At) })
	return out, nil
}
