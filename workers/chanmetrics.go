package workers

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/jetway-gw/jetway/resilience"
)

// WriteChannelMetrics writes, in the Prometheus text format, what this
// worker's calls did on each channel of its APIs' channel sets (a
// release's shadow included, whose answers no caller sees: its status
// mismatches and latency are here), the channels' states and shares as
// the controller stored them, and each release's percent. Nothing when
// the worker serves no channel set.
func (w *Worker) WriteChannelMetrics(out io.Writer, node string) error {
	w.chans.mu.Lock()
	sets := slices.Collect(maps.Values(w.chans.sets))
	w.chans.mu.Unlock()
	if len(sets) == 0 {
		return nil
	}
	slices.SortFunc(sets, func(a, b *chanSet) int { return strings.Compare(a.api, b.api) })
	type row struct {
		api, channel string
		c            *chanCounter
	}
	var rows []row
	for _, cs := range sets {
		m := *cs.counters.Load()
		names := make([]string, 0, len(m))
		for name := range m {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			rows = append(rows, row{cs.api, name, m[name]})
		}
	}
	var b strings.Builder
	b.WriteString("# HELP jetway_worker_channel_calls_total Calls this worker made on each channel, by outcome (the API's classify); probes and shadow copies included.\n# TYPE jetway_worker_channel_calls_total counter\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "jetway_worker_channel_calls_total{api=%q,channel=%q,outcome=\"ok\",node=%q} %d\n", r.api, r.channel, node, r.c.totals.ok.Load())
		fmt.Fprintf(&b, "jetway_worker_channel_calls_total{api=%q,channel=%q,outcome=\"failed\",node=%q} %d\n", r.api, r.channel, node, r.c.totals.failed.Load())
	}
	b.WriteString("# HELP jetway_worker_channel_probes_total Probe calls this worker made on each channel.\n# TYPE jetway_worker_channel_probes_total counter\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "jetway_worker_channel_probes_total{api=%q,channel=%q,node=%q} %d\n", r.api, r.channel, node, r.c.totals.probes.Load())
	}
	b.WriteString("# HELP jetway_worker_channel_mismatches_total Shadow copies whose status differed from the answer the caller got.\n# TYPE jetway_worker_channel_mismatches_total counter\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "jetway_worker_channel_mismatches_total{api=%q,channel=%q,node=%q} %d\n", r.api, r.channel, node, r.c.totals.mismatches.Load())
	}
	b.WriteString("# HELP jetway_worker_channel_duration_seconds How long this worker's calls on each channel took.\n# TYPE jetway_worker_channel_duration_seconds histogram\n")
	for _, r := range rows {
		var cum int64
		for i, bound := range resilience.LatencyBounds {
			cum += r.c.totals.latency[i].Load()
			fmt.Fprintf(&b, "jetway_worker_channel_duration_seconds_bucket{api=%q,channel=%q,node=%q,le=\"%g\"} %d\n", r.api, r.channel, node, bound.Seconds(), cum)
		}
		cum += r.c.totals.latency[len(resilience.LatencyBounds)].Load()
		fmt.Fprintf(&b, "jetway_worker_channel_duration_seconds_bucket{api=%q,channel=%q,node=%q,le=\"+Inf\"} %d\n", r.api, r.channel, node, cum)
		fmt.Fprintf(&b, "jetway_worker_channel_duration_seconds_sum{api=%q,channel=%q,node=%q} %g\n", r.api, r.channel, node, float64(r.c.totals.latencySum.Load())/1e9)
		fmt.Fprintf(&b, "jetway_worker_channel_duration_seconds_count{api=%q,channel=%q,node=%q} %d\n", r.api, r.channel, node, cum)
	}
	b.WriteString("# HELP jetway_worker_channel_share The share of its weight each channel takes, as this worker routes by the controller's last stored state (1 available, the ramp step, 0 cut or probing).\n# TYPE jetway_worker_channel_share gauge\n")
	for _, cs := range sets {
		if v := cs.view.Load(); v != nil {
			for _, st := range v.Channels {
				fmt.Fprintf(&b, "jetway_worker_channel_share{api=%q,channel=%q,state=%q,node=%q} %g\n", cs.api, st.Name, st.State, node, st.Share)
			}
		}
	}
	b.WriteString("# HELP jetway_worker_release_percent The percent of calls a release's canary takes, as this worker routes.\n# TYPE jetway_worker_release_percent gauge\n")
	for _, cs := range sets {
		if v := cs.view.Load(); v != nil && v.Release != nil {
			fmt.Fprintf(&b, "jetway_worker_release_percent{api=%q,canary=%q,stage=%q,node=%q} %g\n", cs.api, v.Release.Canary, v.Release.Stage, node, v.Release.Percent)
		}
	}
	_, err := io.WriteString(out, b.String())
	return err
}
