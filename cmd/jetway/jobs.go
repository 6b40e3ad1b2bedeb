package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/registry"
)

// jobQueueEvery is how often an edge reads the async job queues.
const jobQueueEvery = 5 * time.Second

// jobQueues are the async job queues as an edge last read them.
type jobQueues struct {
	at   time.Time
	list []registry.JobQueue
}

// watchJobs reads the job queues (registry.ReadJobQueues: two stream
// infos and a get per API tier with jobs) every jobQueueEvery while the
// registry has an API that takes async calls, for /metrics and the job
// alerts (runAlerts).
func (n *node) watchJobs(ctx context.Context, nc *nats.Conn) {
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	t := time.NewTicker(jobQueueEvery)
	defer t.Stop()
	warned := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if !hasAsync(n.watcher.Current()) {
				n.jobQueues.Store(nil)
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, jobQueueEvery-time.Second)
			qs, err := registry.ReadJobQueues(rctx, js)
			cancel()
			if err != nil {
				if now.Sub(warned) > time.Minute {
					n.log.Warn("reading the async job queues", "err", err)
					warned = now
				}
				continue
			}
			n.jobQueues.Store(&jobQueues{at: now, list: qs})
		}
	}
}

// hasAsync reports whether an API of the snapshot takes async calls.
func hasAsync(s *registry.Snapshot) bool {
	if s == nil {
		return false
	}
	for _, a := range s.APIs {
		if a.Async != nil {
			return true
		}
	}
	for _, a := range s.Drafts {
		if a.Async != nil {
			return true
		}
	}
	return false
}

// writeJobQueueMetrics writes the job queues as last read.
func (n *node) writeJobQueueMetrics(w io.Writer) {
	q := n.jobQueues.Load()
	if q == nil {
		return
	}
	fmt.Fprintln(w, "# HELP jetway_jobs_queued Async jobs of the API tier in the jobs stream (waiting, between attempts or running), as this edge last read them.")
	fmt.Fprintln(w, "# TYPE jetway_jobs_queued gauge")
	for _, j := range q.list {
		fmt.Fprintf(w, "jetway_jobs_queued{api=%q} %d\n", j.API, j.Queued)
	}
	fmt.Fprintln(w, "# HELP jetway_jobs_oldest_age_seconds How long ago the API tier's oldest job in the jobs stream was submitted (0: none).")
	fmt.Fprintln(w, "# TYPE jetway_jobs_oldest_age_seconds gauge")
	for _, j := range q.list {
		age := 0.0
		if !j.Oldest.IsZero() {
			age = q.at.Sub(j.Oldest).Seconds()
		}
		fmt.Fprintf(w, "jetway_jobs_oldest_age_seconds{api=%q} %.3f\n", j.API, age)
	}
	fmt.Fprintln(w, "# HELP jetway_dead_letters The API tier's dead letters kept (jetway dlq list).")
	fmt.Fprintln(w, "# TYPE jetway_dead_letters gauge")
	for _, j := range q.list {
		fmt.Fprintf(w, "jetway_dead_letters{api=%q} %d\n", j.API, j.DeadLetters)
	}
}
