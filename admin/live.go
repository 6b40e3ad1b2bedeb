package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/otel"
)

// Bounds of the live feeds: streams open at once, batches queued for a
// slow reader (the oldest go first past it), and the comment that keeps an
// idle stream's proxies from closing it.
const (
	maxLiveStreams     = 32
	maxStreamsPerActor = 4 // one token cannot take every slot
	liveQueue          = 16
)

// liveKeepAlive is how often an idle stream gets a comment;
// liveWriteTimeout how long one write may take before the reader is let
// go. Variables for the tests.
var (
	liveKeepAlive    = 15 * time.Second
	liveWriteTimeout = 10 * time.Second
)

// nodes answers the live nodes of the cluster, from their heartbeats.
func (s *Server) nodes(w http.ResponseWriter, _ *http.Request) {
	if s.o.Nodes == nil {
		writeError(w, http.StatusNotFound, "NOT_FOUND", "this admin API does not follow the nodes")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": s.o.Nodes(time.Now())})
}

// records streams the cluster's per-second records as server-sent events
// (GET /v1/records/stream?api=NAME): one "records" event per node's batch
// as it arrives (an array of otel.Record), the way jetway top reads them.
// One subscription serves every stream (liveHub): a batch is decoded once,
// a batch over maxLiveBatch bytes is dropped unread, a reader slower than
// the records loses its oldest batches and never holds up the others, and
// at most maxLiveStreams are open at once.
func (s *Server) records(w http.ResponseWriter, r *http.Request) {
	if s.o.Conn == nil {
		writeError(w, http.StatusNotFound, "NOT_FOUND", "this admin API has no live records")
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "INTERNAL", "the connection cannot stream")
		return
	}
	select {
	case s.live <- struct{}{}:
		defer func() { <-s.live }()
	default:
		writeError(w, http.StatusServiceUnavailable, "TOO_MANY_STREAMS", fmt.Sprintf("at most %d live streams at once", maxLiveStreams))
		return
	}
	p, _ := r.Context().Value(principalKey{}).(principal)
	st := &liveStream{actor: p.actor, api: r.URL.Query().Get("api"), ch: make(chan []otel.Record, liveQueue)}
	if err := s.hub.join(s.o.Conn, st); err != nil {
		if errors.Is(err, errTooManyStreams) {
			writeError(w, http.StatusTooManyRequests, "TOO_MANY_STREAMS", err.Error())
			return
		}
		writeError(w, http.StatusServiceUnavailable, "REGISTRY_UNAVAILABLE", "the records cannot be followed: "+err.Error())
		return
	}
	defer s.hub.leave(st)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	write := func(format string, args ...any) error {
		// A reader that takes no bytes for a while is let go.
		_ = rc.SetWriteDeadline(time.Now().Add(liveWriteTimeout))
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return err
		}
		flusher.Flush()
		return nil
	}
	if write(": jetway records\n\n") != nil {
		return
	}
	tick := time.NewTicker(liveKeepAlive)
	defer tick.Stop()
	for {
		var err error
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			err = write(": keep-alive\n\n")
		case rs := <-st.ch:
			b, _ := json.Marshal(rs)
			err = write("event: records\ndata: %s\n\n", b)
		}
		if err != nil {
			return
		}
	}
}

// maxLiveBatch bounds a records message the feed reads: a node's second
// of a thousand APIs is well under it; a bigger one (a forged flood) is
// dropped before it is decoded.
const maxLiveBatch = 256 << 10

// liveHub is the one subscription to the records behind every live
// stream, made with the first and dropped with the last.
type liveHub struct {
	mu      sync.Mutex
	sub     *nats.Subscription
	streams map[*liveStream]struct{}
}

type liveStream struct {
	actor, api string
	ch         chan []otel.Record
}

var errTooManyStreams = fmt.Errorf("at most %d live streams per token at once", maxStreamsPerActor)

func (h *liveHub) join(nc *nats.Conn, st *liveStream) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for o := range h.streams {
		if o.actor == st.actor {
			n++
		}
	}
	if n >= maxStreamsPerActor {
		return errTooManyStreams
	}
	if h.sub == nil {
		sub, err := nc.Subscribe(otel.MetricsSubjectPrefix+">", h.deliver)
		if err != nil {
			return err
		}
		h.sub, h.streams = sub, map[*liveStream]struct{}{}
	}
	h.streams[st] = struct{}{}
	return nil
}

func (h *liveHub) leave(st *liveStream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.streams, st)
	if len(h.streams) == 0 && h.sub != nil {
		_ = h.sub.Unsubscribe()
		h.sub = nil
	}
}

// deliver decodes a node's batch once and hands each stream its share,
// never blocking: a full stream loses its oldest batch.
func (h *liveHub) deliver(m *nats.Msg) {
	if len(m.Data) > maxLiveBatch {
		return
	}
	var rs []otel.Record
	if json.Unmarshal(m.Data, &rs) != nil {
		return
	}
	// A node speaks only for itself: jetway.metrics.<role>.<id>.
	node := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	rs = slices.DeleteFunc(rs, func(rec otel.Record) bool { return rec.Node != node })
	if len(rs) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for st := range h.streams {
		batch := rs
		if st.api != "" {
			batch = slices.DeleteFunc(slices.Clone(rs), func(rec otel.Record) bool { return rec.API != st.api })
			if len(batch) == 0 {
				continue
			}
		}
		for {
			select {
			case st.ch <- batch:
			default: // full: the oldest goes
				select {
				case <-st.ch:
				default:
				}
				continue
			}
			break
		}
	}
}
