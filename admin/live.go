package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/otel"
)

// Bounds of the live feeds: streams open at once, batches queued for a
// slow reader (the oldest go first past it), and the comment that keeps an
// idle stream's proxies from closing it.
const (
	maxLiveStreams = 32
	liveQueue      = 64
	liveKeepAlive  = 15 * time.Second
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
// A reader slower than the records loses the oldest batches, never
// holds up the others; at most maxLiveStreams are open at once.
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
	api := r.URL.Query().Get("api")
	batches := make(chan []otel.Record, liveQueue)
	sub, err := s.o.Conn.Subscribe(otel.MetricsSubjectPrefix+">", func(m *nats.Msg) {
		var rs []otel.Record
		if json.Unmarshal(m.Data, &rs) != nil {
			return
		}
		// A node speaks only for itself: jetway.metrics.<role>.<id>.
		node := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		rs = slices.DeleteFunc(rs, func(rec otel.Record) bool { return rec.Node != node || (api != "" && rec.API != api) })
		if len(rs) == 0 {
			return
		}
		for {
			select {
			case batches <- rs:
				return
			default: // full: the oldest goes
				select {
				case <-batches:
				default:
				}
			}
		}
	})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "REGISTRY_UNAVAILABLE", "the records cannot be followed: "+err.Error())
		return
	}
	defer func() { _ = sub.Unsubscribe() }()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": jetway records\n\n")
	flusher.Flush()
	rc := http.NewResponseController(w)
	tick := time.NewTicker(liveKeepAlive)
	defer tick.Stop()
	for {
		var err error
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			_, err = fmt.Fprint(w, ": keep-alive\n\n")
		case rs := <-batches:
			b, _ := json.Marshal(rs)
			// A reader that takes no bytes for a while is let go.
			_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
			_, err = fmt.Fprintf(w, "event: records\ndata: %s\n\n", b)
		}
		if err != nil {
			return
		}
		flusher.Flush()
	}
}
