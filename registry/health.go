package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
)

// The states of a Watcher's Health.
const (
	// HealthLive: the snapshot follows NATS now.
	HealthLive = "live"
	// HealthLoading: nothing loaded yet; NATS is connected and the first
	// load is under way, with no failure so far.
	HealthLoading = "loading"
	// HealthSnapshotFile: serving the local snapshot file while the first
	// live load is under way (NATS connected, no failure so far).
	HealthSnapshotFile = "snapshot_file"
	// HealthWatchBroken: NATS and JetStream answer, but a bucket's watch
	// fails (a permission, a deleted bucket, ...).
	HealthWatchBroken = "watch_broken"
	// HealthQuorumLost: NATS is connected but JetStream does not answer
	// (no meta or stream leader: the cluster lost its quorum, or
	// JetStream is off).
	HealthQuorumLost = "quorum_lost"
	// HealthUnreachable: the connection to NATS is down.
	HealthUnreachable = "unreachable"
)

// Health is whether a Watcher's snapshot follows NATS, and if not, why.
type Health struct {
	// Live: the snapshot follows NATS now (State is HealthLive).
	Live bool
	// State is one of HealthLive, HealthLoading, HealthSnapshotFile,
	// HealthWatchBroken, HealthQuorumLost, HealthUnreachable.
	State string
	// Reason says it for a human, e.g. "registry watch broken since
	// 12:00:01: jetstream quorum lost (...)".
	Reason string
	// Since is when the snapshot stopped following NATS (when Run began,
	// for one that never did); zero when live.
	Since time.Time
	// Revision is the snapshot's revision.
	Revision uint64
}

// How JetStream is probed while the watches run: a watch of a cluster that
// lost its quorum gets nothing and says nothing, so the watcher asks
// JetStream about the APIs bucket itself, rarely while it answers and
// often while it does not, to re-watch as soon as it answers again.
const (
	probeHealthy        = 2 * time.Second
	probeBroken         = 250 * time.Millisecond
	probeTimeout        = time.Second
	probeBrokenTimeout  = 500 * time.Millisecond
	probeFailuresToMark = 2 // consecutive failures before the watch counts as broken
)

// Health reports whether the snapshot follows NATS now, and if not, why
// and since when. It never blocks on the network.
func (w *Watcher) Health() Health {
	s := w.Current()
	h := Health{Revision: s.Revision}
	connected := w.o.Conn != nil && w.o.Conn.IsConnected()
	w.mu.Lock()
	var setErr error
	var setSince time.Time
	for _, st := range w.setStates() {
		if st.err != nil && (setErr == nil || st.since.Before(setSince)) {
			setErr, setSince = st.err, st.since
		}
	}
	probeErr, probeSince, started := w.probeErr, w.probeSince, w.started
	w.mu.Unlock()

	err, since := setErr, setSince
	if probeErr != nil && (err == nil || probeSince.Before(since)) {
		err, since = probeErr, probeSince
	}
	if s.Source == SourceLive && connected && err == nil {
		h.Live, h.State = true, HealthLive
		h.Reason = fmt.Sprintf("registry live at revision %d", s.Revision)
		return h
	}
	if since.IsZero() {
		since = started
	}
	if s.Source == SourceFile {
		w.mu.Lock()
		saved := w.fileSavedAt
		w.mu.Unlock()
		if !saved.IsZero() && saved.Before(since) {
			since = saved // the file's entries are as old as the file
		}
	}
	h.Since = since
	serving := fmt.Sprintf("serving the last live snapshot (revision %d, %d apis)", s.Revision, len(s.APIs))
	switch s.Source {
	case SourceFile:
		serving = fmt.Sprintf("serving the local snapshot file (%d apis)", len(s.APIs))
	case SourceNone:
		serving = "nothing loaded yet"
	}
	at := since.Format("15:04:05")
	switch {
	case !connected:
		h.State = HealthUnreachable
		h.Reason = fmt.Sprintf("registry not following nats since %s: nats not reachable; %s", at, serving)
	case err != nil && quorumTrouble(err):
		h.State = HealthQuorumLost
		h.Reason = fmt.Sprintf("registry watch broken since %s: jetstream quorum lost (nats reachable, jetstream not answering: %v); %s", at, err, serving)
	case err != nil:
		h.State = HealthWatchBroken
		h.Reason = fmt.Sprintf("registry watch broken since %s: %v; %s", at, err, serving)
	case s.Source == SourceFile:
		h.State = HealthSnapshotFile
		h.Reason = "loading the registry from nats; " + serving
	default:
		h.State = HealthLoading
		h.Reason = "registry not loaded yet"
	}
	return h
}

type setState struct {
	err   error
	since time.Time
}

// setStates are the watch errors of the sets that hold the snapshot back
// (not the optional ones). w.mu must be held.
func (w *Watcher) setStates() []setState {
	var out []setState
	add := func(name string, err error, since time.Time) {
		if w.watches(name) {
			out = append(out, setState{err, since})
		}
	}
	add(BucketAPIs, w.apis.err, w.apis.errSince)
	add(BucketFlags, w.flags.err, w.flags.errSince)
	add(BucketAlerts, w.alerts.err, w.alerts.errSince)
	add(BucketApps, w.apps.err, w.apps.errSince)
	return out
}

// ErrNoQuorum is a registry stream whose leader has not a majority of its
// replicas current: it cannot commit a write.
var ErrNoQuorum = errors.New("no quorum")

// quorumOf checks a replicated stream's info: a leader and a majority of
// current, online replicas (the leader counting as one). A leader that
// lost its peers still answers STREAM.INFO from its own state.
func quorumOf(info *jetstream.StreamInfo) error {
	cl := info.Cluster
	if info == nil || cl == nil || info.Config.Replicas <= 1 {
		return nil
	}
	if cl.Leader == "" {
		return fmt.Errorf("stream %s: %w (no leader)", info.Config.Name, ErrNoQuorum)
	}
	current := 1
	for _, r := range cl.Replicas {
		if r != nil && r.Current && !r.Offline {
			current++
		}
	}
	if total := 1 + len(cl.Replicas); current*2 <= total {
		return fmt.Errorf("stream %s: %w (%d of %d replicas current)", info.Config.Name, ErrNoQuorum, current, total)
	}
	return nil
}

// quorumTrouble reports whether err is JetStream not answering while NATS
// is connected: a timeout, no responders, no heartbeat, JetStream
// unavailable.
func quorumTrouble(err error) bool {
	var apiErr *jetstream.APIError
	var legacyErr *nats.APIError // the KV watch's (nats.go's older JetStream API)
	return errors.Is(err, ErrNoQuorum) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, nats.ErrJetStreamNotEnabled) ||
		(errors.As(err, &apiErr) && (apiErr.Code == 503 || apiErr.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabled)) ||
		(errors.As(err, &legacyErr) && legacyErr.Code == 503) ||
		strings.Contains(err.Error(), "JetStream system temporarily unavailable")
}

// probe asks JetStream about the watched registry stream until ctx ends:
// every probeHealthy while it answers, every probeBroken once it has
// failed probeFailuresToMark times in a row. When it answers again after
// that, every set is told to watch again at once.
func (w *Watcher) probe(ctx context.Context) {
	nc := w.o.Conn
	if nc == nil {
		return
	}
	stream := "KV_" + BucketAPIs
	if !w.watches(BucketAPIs) && len(w.o.Buckets) > 0 {
		stream = "KV_" + w.o.Buckets[0]
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	failures := 0
	for {
		interval, timeout := probeHealthy, probeTimeout
		if failures >= probeFailuresToMark {
			interval, timeout = probeBroken, probeBrokenTimeout
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		var err error
		if !nc.IsConnected() {
			// Health sees the connection itself, and a reconnection
			// re-watches every set anyway: only note since when.
			w.mu.Lock()
			if w.probeErr == nil {
				w.probeErr, w.probeSince = bus.ErrNotConnected, time.Now()
			}
			w.mu.Unlock()
			continue
		} else {
			pctx, cancel := context.WithTimeout(ctx, timeout)
			var st jetstream.Stream
			st, err = js.Stream(pctx, stream)
			cancel()
			if err == nil {
				err = quorumOf(st.CachedInfo())
			}
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				err = nil // JetStream answers; the watch creates the bucket
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failures++
			if failures == probeFailuresToMark {
				w.mu.Lock()
				w.probeErr, w.probeSince = err, time.Now()
				w.mu.Unlock()
				w.log.Warn("registry watch broken: jetstream not answering", "err", err)
			}
			continue
		}
		w.mu.Lock()
		w.probeErr, w.probeSince = nil, time.Time{}
		if failures >= probeFailuresToMark {
			close(w.rewatch)
			w.rewatch = make(chan struct{})
			w.log.Info("jetstream answers again; re-watching the registry")
		}
		w.mu.Unlock()
		failures = 0
	}
}
