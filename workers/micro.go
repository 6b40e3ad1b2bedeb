package workers

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetway-gw/jetway/bus"
)

// A worker answers the NATS services protocol ($SRV.PING, $SRV.INFO,
// $SRV.STATS) as one instance of the service bus.ServiceName, with
// one endpoint per API tier it serves, so `nats micro ls`, `nats micro
// info` and `nats micro stats` show Jetway's pools, their APIs and per-API
// counts and latency next to the NATS services Jetway fronts. The answers
// are those of nats.go's micro package (its types, v1); Jetway does not use
// micro.AddService because the worker already subscribes to its APIs'
// subjects itself, in the pools' queue groups.

// microVersion is the version the instances report.
const microVersion = "1.0.0"

// apiStats are an API tier's counts on this worker, kept while the worker
// serves it. Updated with atomics by each call.
type apiStats struct {
	requests atomic.Int64
	errors   atomic.Int64
	nanos    atomic.Int64 // processing time, summed
	lastErr  atomic.Pointer[string]
}

// record counts one call: its time in the worker and whether it failed
// (a gateway-made error or a 5xx) and, if it did, why.
func (s *apiStats) record(d time.Duration, failed bool, errText string) {
	s.requests.Add(1)
	s.nanos.Add(int64(d))
	if failed {
		s.errors.Add(1)
		e := errText // a copy, so that only a failure moves it to the heap
		s.lastErr.Store(&e)
	}
}

// The protocol's messages (io.nats.micro.v1), as nats.go's micro package
// writes them.
type (
	microIdentity struct {
		Name     string            `json:"name"`
		ID       string            `json:"id"`
		Version  string            `json:"version"`
		Metadata map[string]string `json:"metadata"`
	}
	microPing struct {
		microIdentity
		Type string `json:"type"`
	}
	microEndpointInfo struct {
		Name       string            `json:"name"`
		Subject    string            `json:"subject"`
		QueueGroup string            `json:"queue_group"`
		Metadata   map[string]string `json:"metadata"`
	}
	microInfo struct {
		microIdentity
		Type        string              `json:"type"`
		Description string              `json:"description"`
		Endpoints   []microEndpointInfo `json:"endpoints"`
	}
	microEndpointStats struct {
		pool                  string
		Name                  string        `json:"name"`
		Subject               string        `json:"subject"`
		QueueGroup            string        `json:"queue_group"`
		NumRequests           int64         `json:"num_requests"`
		NumErrors             int64         `json:"num_errors"`
		LastError             string        `json:"last_error"`
		ProcessingTime        time.Duration `json:"processing_time"`
		AverageProcessingTime time.Duration `json:"average_processing_time"`
	}
	microStats struct {
		microIdentity
		Type      string               `json:"type"`
		Started   time.Time            `json:"started"`
		Endpoints []microEndpointStats `json:"endpoints"`
	}
)

// startMicro subscribes the worker to the protocol's subjects of its
// service name. A worker whose user may not (an older permission list) logs
// it and serves its APIs all the same.
func (w *Worker) startMicro() {
	w.started = time.Now().UTC()
	for _, subj := range bus.ServiceSubjects() {
		sub, err := w.o.Conn.Subscribe(subj, w.onMicro)
		if err != nil {
			w.log.Warn("not answering the NATS services protocol", "subject", subj, "err", err)
			continue
		}
		w.micro = append(w.micro, sub)
	}
}

// onMicro answers one PING, INFO or STATS request.
func (w *Worker) onMicro(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	verb, rest, _ := strings.Cut(strings.TrimPrefix(m.Subject, bus.ServicesPrefix), ".")
	if name, id, _ := strings.Cut(rest, "."); id != "" && id != w.id || name != "" && name != bus.ServiceName {
		return // for another instance
	}
	ident := microIdentity{Name: bus.ServiceName, ID: w.id, Version: microVersion, Metadata: w.microMetadata()}
	var v any
	switch verb {
	case "PING":
		v = microPing{ident, "io.nats.micro.v1.ping_response"}
	case "INFO":
		info := microInfo{microIdentity: ident, Type: "io.nats.micro.v1.info_response",
			Description: "Jetway worker: the APIs of its pools, called over NATS by the edges"}
		for _, e := range w.microEndpoints() {
			info.Endpoints = append(info.Endpoints, microEndpointInfo{Name: e.Name, Subject: e.Subject, QueueGroup: e.QueueGroup,
				Metadata: map[string]string{"api": e.Name, "pool": e.pool}})
		}
		v = info
	case "STATS":
		v = microStats{microIdentity: ident, Type: "io.nats.micro.v1.stats_response", Started: w.started, Endpoints: w.microEndpoints()}
	default:
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	if err := m.Respond(b); err != nil {
		w.log.Debug("answering the NATS services protocol", "err", err)
	}
}

func (w *Worker) microMetadata() map[string]string {
	pools := "*"
	if len(w.o.Pools) > 0 {
		pools = strings.Join(w.o.Pools, ",")
	}
	return map[string]string{"pools": pools, "wire": strconv.Itoa(bus.WireVersion)}
}

// microEndpoints are the API tiers the worker serves now, with their
// counts, sorted by name.
func (w *Worker) microEndpoints() []microEndpointStats {
	w.mu.Lock()
	eps := make([]microEndpointStats, 0, len(w.subs))
	for key, as := range w.subs {
		st := as.state.Load()
		n, nanos := as.stats.requests.Load(), as.stats.nanos.Load()
		e := microEndpointStats{pool: st.api.Pool, Name: key, Subject: as.sub.Subject, QueueGroup: bus.QueueGroup(st.api.Pool),
			NumRequests: n, NumErrors: as.stats.errors.Load(), ProcessingTime: time.Duration(nanos)}
		if n > 0 {
			e.AverageProcessingTime = time.Duration(nanos / n)
		}
		if le := as.stats.lastErr.Load(); le != nil {
			e.LastError = *le
		}
		eps = append(eps, e)
	}
	w.mu.Unlock()
	slices.SortFunc(eps, func(a, b microEndpointStats) int { return strings.Compare(a.Name, b.Name) })
	return eps
}
