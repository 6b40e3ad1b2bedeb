package admin

import (
	"errors"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// Async jobs and their dead letters (docs/async.md): the queues and the
// records for a viewer; a job's status (it can hold a backend's answer),
// a dead letter's request and its replay for an operator; a purge for an
// admin. Replays and purges go through the request's registry client, so
// the audit trail names the token (kind dlq).

// JobQueueItem is one API tier's async jobs as GET /v1/jobs/queues lists
// them: how many are in the jobs stream, when the oldest was submitted
// and how long ago, and how many dead letters it has.
type JobQueueItem struct {
	API         string     `json:"api"` // the tier's key: name, name@sandbox, name@draft
	Queued      uint64     `json:"queued"`
	Oldest      *time.Time `json:"oldest,omitempty"`
	OldestAge   float64    `json:"oldest_age_seconds"`
	DeadLetters uint64     `json:"dead_letters"`
}

// DeadLetterView is one dead letter with its request's body, as GET
// /v1/deadletters/{seq} answers it and `jetway dlq show` prints it: the
// body as text when it is UTF-8, else in body_base64.
type DeadLetterView struct {
	registry.DeadLetter
	Body       *string `json:"body,omitempty"`
	BodyBase64 []byte  `json:"body_base64,omitempty"`
}

// Replayed is a dead letter sent again (POST /v1/deadletters/{seq}/replay):
// the record as it was, and where its job's status is read.
type Replayed struct {
	DeadLetter registry.DeadLetter `json:"dead_letter"`
	Job        string              `json:"job"`
	Location   string              `json:"location"`
}

// jobQueues answers every API tier's job queue.
func (s *Server) jobQueues(w http.ResponseWriter, r *http.Request) {
	qs, err := s.c.JobQueues(r.Context())
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	now := time.Now()
	items := make([]JobQueueItem, 0, len(qs))
	for _, q := range qs {
		it := JobQueueItem{API: q.API, Queued: q.Queued, DeadLetters: q.DeadLetters}
		if !q.Oldest.IsZero() {
			oldest := q.Oldest.UTC()
			it.Oldest, it.OldestAge = &oldest, max(now.Sub(oldest).Seconds(), 0)
		}
		items = append(items, it)
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}

// jobStatus answers any app's job by its id: what its caller reads at
// /_jetway/jobs/{id}, the backend's answer included.
func (s *Server) jobStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.c.JobStatus(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// listDeadLetters answers the newest dead letters (?api=NAME: of one API,
// every tier; ?limit=N, default 100), oldest first, without their bodies.
func (s *Server) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	api, ok := apiParam(w, r)
	if !ok {
		return
	}
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			writeError(w, http.StatusBadRequest, "BAD_REQUEST", "limit must be from 1 to 10000")
			return
		}
		limit = n
	}
	dls, err := s.c.DeadLetters(r.Context(), api, limit)
	if err != nil && !errors.Is(err, registry.ErrNoDeadLetters) {
		writeRegistryError(w, err, s.log)
		return
	}
	if dls == nil {
		dls = []registry.DeadLetter{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": dls})
}

// getDeadLetter answers one dead letter with its request's body.
func (s *Server) getDeadLetter(w http.ResponseWriter, r *http.Request) {
	seq, ok := seqParam(w, r)
	if !ok {
		return
	}
	d, body, err := s.c.DeadLetter(r.Context(), seq)
	if err != nil {
		writeDeadLetterError(w, err, s)
		return
	}
	v := DeadLetterView{DeadLetter: *d}
	if utf8.Valid(body) {
		text := string(body)
		v.Body = &text
	} else {
		v.BodyBase64 = body
	}
	writeJSON(w, http.StatusOK, v)
}

// replayDeadLetter sends a dead letter's job again: pending at the same
// address with no attempts spent; the record leaves the dead letters.
func (s *Server) replayDeadLetter(w http.ResponseWriter, r *http.Request) {
	seq, ok := seqParam(w, r)
	if !ok {
		return
	}
	d, err := s.client(w, r).ReplayDeadLetter(r.Context(), seq)
	switch {
	case err != nil && d == nil:
		s.replayRefused(w, err)
		return
	case err != nil:
		// The job is sent again, but its record stays: answered as made
		// (a retry would send it twice), saying so.
		s.log.Error("dead letter replayed but kept", "seq", seq, "err", err)
		w.Header().Add("Warning", `199 jetway "the job was sent again, but its dead letter stays and the replay is not in the audit trail"`)
	}
	writeJSON(w, http.StatusOK, Replayed{DeadLetter: *d, Job: d.Job, Location: "/_jetway/jobs/" + d.Job})
}

// replayRefused answers a replay that sent nothing: a record that is not
// a job's, or whose job has not ended (replayed already, its record kept),
// is a 409; the rest as the registry's errors.
func (s *Server) replayRefused(w http.ResponseWriter, err error) {
	if errors.Is(err, registry.ErrNotReplayable) {
		writeError(w, http.StatusConflict, "CONFLICT", err.Error())
		return
	}
	writeDeadLetterError(w, err, s)
}

// purgeDeadLetters removes the dead letters of ?api=NAME, or all.
func (s *Server) purgeDeadLetters(w http.ResponseWriter, r *http.Request) {
	api, ok := apiParam(w, r)
	if !ok {
		return
	}
	n, err := s.client(w, r).PurgeDeadLetters(r.Context(), api)
	if err != nil {
		writeDeadLetterError(w, err, s)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"removed": n})
}

// writeDeadLetterError is writeRegistryError, with a cluster that has no
// dead letters stream a 404.
func writeDeadLetterError(w http.ResponseWriter, err error, s *Server) {
	if errors.Is(err, registry.ErrNoDeadLetters) {
		writeError(w, http.StatusNotFound, "NOT_FOUND", err.Error())
		return
	}
	writeRegistryError(w, err, s.log)
}

// apiParam reads ?api= ("": every API); ok false when it answered 400.
func apiParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	api := r.URL.Query().Get("api")
	if api != "" && bus.ValidName(api) != nil {
		writeError(w, http.StatusBadRequest, "BAD_REQUEST", "api is not a valid API name")
		return "", false
	}
	return api, true
}

// seqParam reads {seq}, a dead letter's sequence; ok false when it
// answered 400.
func seqParam(w http.ResponseWriter, r *http.Request) (uint64, bool) {
	seq, err := strconv.ParseUint(chi.URLParam(r, "seq"), 10, 64)
	if err != nil || seq == 0 {
		writeError(w, http.StatusBadRequest, "BAD_REQUEST", "a dead letter's sequence is a positive number, as GET /v1/deadletters lists it")
		return 0, false
	}
	return seq, true
}
