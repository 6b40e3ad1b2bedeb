package admin

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
)

// secretItem describes a stored secret; no answer ever holds a value.
type secretItem struct {
	Pool     string    `json:"pool"`
	Name     string    `json:"name"`
	Revision uint64    `json:"revision"`
	Bytes    int       `json:"bytes"`
	Written  time.Time `json:"written"`
	Invalid  string    `json:"invalid,omitempty"`
}

// listSecrets describes the secrets of ?pool= (every pool without it).
// Admins only: even a secret's name says which partner a pool calls.
func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	all, err := s.c.ListSecrets(r.Context(), r.URL.Query().Get("pool"))
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	items := make([]secretItem, 0, len(all))
	for _, sc := range all {
		it := secretItem{Pool: sc.Pool, Name: sc.Name, Revision: sc.Revision, Bytes: sc.Size, Written: sc.Updated.UTC()}
		if sc.Err != nil {
			it.Invalid = sc.Err.Error()
		}
		items = append(items, it)
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}

// putSecret stores the body as the secret {name} of {pool}, replacing the
// one stored; the answer describes it without its value.
func (s *Server) putSecret(w http.ResponseWriter, r *http.Request) {
	doc, ok := readBody(w, r)
	if !ok {
		return
	}
	pool, name := chi.URLParam(r, "pool"), chi.URLParam(r, "name")
	rev, err := s.client(w, r).PutSecret(r.Context(), pool, name, doc)
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	w.Header().Set("ETag", etag(rev))
	writeJSON(w, http.StatusOK, secretItem{Pool: pool, Name: name, Revision: rev, Bytes: len(doc), Written: time.Now().UTC()})
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	if err := s.client(w, r).DeleteSecret(r.Context(), chi.URLParam(r, "pool"), chi.URLParam(r, "name")); err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
