package registry

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
)

// JobQueue is what the streams say of one API tier's async jobs: how many
// are in the jobs stream (waiting, between attempts or running), when the
// oldest of them was submitted, and how many dead letters it has.
type JobQueue struct {
	API         string    `json:"api"` // the tier's key: name, name@sandbox, name@draft
	Queued      uint64    `json:"queued"`
	Oldest      time.Time `json:"oldest,omitempty"`
	DeadLetters uint64    `json:"dead_letters"`
}

// maxQueueReads bounds the oldest-job reads of one ReadJobQueues: the
// APIs with the most jobs first.
const maxQueueReads = 256

// ReadJobQueues reads the job queues of every API tier from the streams:
// one stream info of each stream (its per-subject counts) and one get of
// the oldest job of each tier that has any. Callback messages are not
// counted. Missing streams read as empty.
func ReadJobQueues(ctx context.Context, js jetstream.JetStream) ([]JobQueue, error) {
	byKey := map[string]*JobQueue{}
	get := func(subject string) *JobQueue {
		_, tier, api, ok := bus.ParseJobSubject(subject)
		if !ok || tier == bus.TierCallback {
			return nil
		}
		key := api
		if tier != bus.TierAPI {
			key += "@" + tier
		}
		q := byKey[key]
		if q == nil {
			q = &JobQueue{API: key}
			byKey[key] = q
		}
		return q
	}
	counts := func(stream, filter string) (jetstream.Stream, map[string]uint64, error) {
		st, err := js.Stream(ctx, stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, nil, nil
		} else if err != nil {
			return nil, nil, fmt.Errorf("reading stream %s: %w", stream, err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return nil, nil, fmt.Errorf("reading stream %s: %w", stream, err)
		}
		return st, info.State.Subjects, nil
	}
	jobs, queued, err := counts(bus.StreamJobs, bus.JobsPrefix+">")
	if err != nil {
		return nil, err
	}
	subjects := make([]string, 0, len(queued))
	for subj, n := range queued {
		if q := get(subj); q != nil && n > 0 {
			q.Queued += n
			subjects = append(subjects, subj)
		}
	}
	sort.Slice(subjects, func(i, j int) bool { return queued[subjects[i]] > queued[subjects[j]] })
	for _, subj := range subjects[:min(len(subjects), maxQueueReads)] {
		m, err := jobs.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subj))
		if err != nil {
			continue // taken meanwhile
		}
		if q := get(subj); q.Oldest.IsZero() || m.Time.Before(q.Oldest) {
			q.Oldest = m.Time.UTC()
		}
	}
	_, dead, err := counts(bus.StreamDeadLetters, bus.DeadLetterPrefix+">")
	if err != nil {
		return nil, err
	}
	for subj, n := range dead {
		if q := get(subj); q != nil {
			q.DeadLetters += n
		}
	}
	out := make([]JobQueue, 0, len(byKey))
	for _, q := range byKey {
		out = append(out, *q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].API < out[j].API })
	return out, nil
}
