package push

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"
)

// latencyBuckets are the upper bounds of the publish → write histogram.
var latencyBuckets = [...]time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second,
}

// histogram counts live deliveries by the time from the stream's storing
// of the message to its write to the client (clocks of one cluster).
type histogram struct {
	counts [len(latencyBuckets) + 1]atomic.Int64
	sumNs  atomic.Int64
}

func (h *histogram) observe(d time.Duration) {
	i := 0
	for i < len(latencyBuckets) && d > latencyBuckets[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

// WritePrometheus writes the edge's push metrics in the Prometheus text
// format, labelled with node.
func (s *Server) WritePrometheus(w io.Writer, node string) error {
	st := s.Stats()
	bw := bufio.NewWriter(w)
	lbl := fmt.Sprintf(`node=%q`, node)
	for _, m := range []struct {
		name, help, typ string
		v               int64
	}{
		{"jetway_push_connections", "Push connections open now.", "gauge", st.Connections},
		{"jetway_push_topics", "Topics this edge follows now (one JetStream consumer each).", "gauge", int64(st.Topics)},
		{"jetway_push_delivered_total", "Messages written to push clients.", "counter", st.Delivered},
		{"jetway_push_replayed_total", "Of those, messages read from the stream for a client catching up (a resume, or a client behind the live ring).", "counter", st.Replayed},
		{"jetway_push_catch_ups_total", "Times a client fell behind the live ring and caught up from the stream.", "counter", st.CatchUps},
		{"jetway_push_write_timeouts_total", "Connections closed because a write blocked past the write timeout.", "counter", st.WriteTimeouts},
		{"jetway_push_refused_total", "Connections refused at admission (a cap, the connect rate).", "counter", st.Refused},
		{"jetway_push_acks_total", "Acks received from push clients (connections and HTTP).", "counter", st.Acks},
		{"jetway_push_ack_writes_total", "Bucket writes of connections' acks (the acks of one subscriber within 100ms are one).", "counter", st.AcksStored},
		{"jetway_push_receipts_total", "Delivery receipts stored for publishers that asked (receipt=1).", "counter", st.Receipts},
		{"jetway_push_dead_letters_total", "Group messages written off as dead letters after max_deliver deliveries.", "counter", st.DeadLetters},
		{"jetway_push_ack_errors_total", "Connections' acks not stored (a bucket error, or the queue full): their messages are sent again on resume.", "counter", st.AckErrors},
	} {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n%s{%s} %d\n", m.name, m.help, m.name, m.typ, m.name, lbl, m.v)
	}
	fmt.Fprintln(bw, "# HELP jetway_push_delivery_seconds Time from the stream's storing of a message to its write to a client, for live deliveries.")
	fmt.Fprintln(bw, "# TYPE jetway_push_delivery_seconds histogram")
	var cum int64
	for i, b := range latencyBuckets {
		cum += s.latency.counts[i].Load()
		fmt.Fprintf(bw, "jetway_push_delivery_seconds_bucket{%s,le=\"%g\"} %d\n", lbl, b.Seconds(), cum)
	}
	cum += s.latency.counts[len(latencyBuckets)].Load()
	fmt.Fprintf(bw, "jetway_push_delivery_seconds_bucket{%s,le=\"+Inf\"} %d\n", lbl, cum)
	fmt.Fprintf(bw, "jetway_push_delivery_seconds_sum{%s} %g\n", lbl, time.Duration(s.latency.sumNs.Load()).Seconds())
	fmt.Fprintf(bw, "jetway_push_delivery_seconds_count{%s} %d\n", lbl, cum)
	fmt.Fprintln(bw, "# HELP jetway_push_disconnects_total SSE, WebSocket and TCP connections ended, by why (client_gone, revoked, expired, shutdown, write_timeout, ping_timeout, frame_error, bad_command, too_many_commands, kicked, error).")
	fmt.Fprintln(bw, "# TYPE jetway_push_disconnects_total counter")
	for k := endNone + 1; k < nEndKinds; k++ {
		fmt.Fprintf(bw, "jetway_push_disconnects_total{%s,reason=%q} %d\n", lbl, endNames[k], s.stats.disconnects[k].Load())
	}
	// Read now from what the writers note anyway: nothing on the hot path.
	lags := s.maxLags()
	topics := make([]string, 0, len(lags))
	for t := range lags {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	fmt.Fprintln(bw, "# HELP jetway_push_max_lag The most sequences a connection of the topic on this edge is behind the topic's newest message (not yet written to it, nor passed as not for it).")
	fmt.Fprintln(bw, "# TYPE jetway_push_max_lag gauge")
	for _, t := range topics {
		fmt.Fprintf(bw, "jetway_push_max_lag{%s,topic=%q} %d\n", lbl, t, lags[t])
	}
	return bw.Flush()
}
