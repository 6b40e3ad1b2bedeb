package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/push"
	"github.com/jetway-gw/jetway/registry"
)

// Push topics are registry entries like alert rules: listed with their
// revisions (one that does not validate, with why), read with an ETag,
// written and deleted at the revision a write names. The edges' push
// connections are no entry: each edge holds its own, and the admin API
// asks them all at once over NATS (push.Query), the way `jetway push …
// --cluster` does.

type topicItem struct {
	Name     string          `json:"name"`
	Revision uint64          `json:"revision"`
	Topic    json.RawMessage `json:"topic,omitempty"`
	Invalid  string          `json:"error,omitempty"`
}

func (s *Server) listTopics(w http.ResponseWriter, r *http.Request) {
	all, err := s.c.ListTopics(r.Context())
	writeListed(w, s, all, err, func(name string, rev uint64, v json.RawMessage, invalid string) any {
		return topicItem{Name: name, Revision: rev, Topic: v, Invalid: invalid}
	})
}

func (s *Server) getTopic(w http.ResponseWriter, r *http.Request) {
	t, err := s.c.GetTopic(r.Context(), chi.URLParam(r, "name"))
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	w.Header().Set("ETag", etag(t.Revision))
	writeJSON(w, http.StatusOK, t)
}

// putTopic writes a topic at the revision If-Match names, or new with
// If-None-Match: *. Who may publish and subscribe is in the entry: an
// admin's to write.
func (s *Server) putTopic(w http.ResponseWriter, r *http.Request) {
	opt, doc, ok := readWrite(w, r)
	if !ok {
		return
	}
	parsed, err := registry.ParseTopic("", doc)
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	if !sameName(w, "topic", chi.URLParam(r, "name"), parsed.Name) {
		return
	}
	t, err := s.client(w, r).PutTopic(r.Context(), doc, opt)
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	w.Header().Set("ETag", etag(t.Revision))
	writeJSON(w, http.StatusOK, t)
}

func (s *Server) deleteTopic(w http.ResponseWriter, r *http.Request) {
	rev, ok := ifMatch(w, r)
	if !ok {
		return
	}
	if err := s.client(w, r).DeleteTopic(r.Context(), chi.URLParam(r, "name"), registry.IfRevision(rev)); err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// askEdges asks every edge's push side q and answers the request with
// their answers, one item per edge, sorted by edge id, and the edges heard
// beating that did not answer within askTimeout ("missing").
func (s *Server) askEdges(w http.ResponseWriter, r *http.Request, q push.Query) {
	if s.o.Conn == nil {
		writeError(w, http.StatusNotFound, "NOT_FOUND", "this admin API does not reach the edges")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), askTimeout)
	defer cancel()
	items, missing, err := push.Ask(ctx, s.o.Conn, q)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "REGISTRY_UNAVAILABLE", "the edges cannot be asked: "+err.Error())
		return
	}
	if items == nil {
		items = []push.Answer{}
	}
	if missing == nil {
		missing = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "missing": missing})
}

// askTimeout bounds the wait for the edges' answers: every edge heard
// beating answers within it, or is listed as missing.
const askTimeout = 3 * time.Second

// pushStats answers every edge's push counters.
func (s *Server) pushStats(w http.ResponseWriter, r *http.Request) {
	s.askEdges(w, r, push.Query{Op: "stats"})
}

// pushConnections answers every edge's push connections (?app=ID: of one
// app; ?limit=N: at most N an edge, up to push.MaxQueryConnections). They
// name devices and users: an operator's to see.
func (s *Server) pushConnections(w http.ResponseWriter, r *http.Request) {
	q := push.Query{Op: "connections", App: r.URL.Query().Get("app")}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "BAD_REQUEST", "limit is a number of connections, 1 or more")
			return
		}
		q.Limit = n
	}
	if q.App != "" && bus.ValidName(q.App) != nil {
		writeError(w, http.StatusBadRequest, "BAD_REQUEST", "app is not a valid app id")
		return
	}
	s.askEdges(w, r, q)
}

// pushKick ends an app's push connections (of one topic, when given) on
// every edge ({"app":"ID","topic":"NAME"}); each edge answers how many.
// Its clients may come back: to keep an app out, disable it.
func (s *Server) pushKick(w http.ResponseWriter, r *http.Request) {
	doc, ok := readBody(w, r)
	if !ok {
		return
	}
	var in struct {
		App   string `json:"app"`
		Topic string `json:"topic"`
	}
	// Strict: a misspelt "topic" must not widen the kick to every topic.
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil || dec.More() || bus.ValidName(in.App) != nil || (in.Topic != "" && bus.ValidName(in.Topic) != nil) {
		writeError(w, http.StatusBadRequest, "BAD_REQUEST", `the body is {"app": "<app id>", "topic": "<topic name, optional>"}`)
		return
	}
	key := in.App
	if in.Topic != "" {
		key += "/" + in.Topic
	}
	if err := s.client(w, r).Record(r.Context(), "push", "kick", key); err != nil {
		writeRegistryError(w, err, s.log) // a kick nobody could see afterwards is not made
		return
	}
	s.askEdges(w, r, push.Query{Op: "kick", App: in.App, Topic: in.Topic})
}
