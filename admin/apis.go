package admin

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/jetway-gw/jetway/registry"
)

// APIItem is an API as a list shows it: the entry in force and its
// revision, and the key's newest revision when that is not the one in
// force (a newer value that does not validate).
type APIItem struct {
	Name     string          `json:"name"`
	Revision uint64          `json:"revision"`
	Entry    json.RawMessage `json:"entry,omitempty"`
	Newest   uint64          `json:"newest_revision,omitempty"`
	Invalid  string          `json:"newest_error,omitempty"`
}

func itemOf(f registry.InForce) APIItem {
	it := APIItem{Name: f.Entry.Name, Revision: f.Entry.Revision}
	if f.API != nil {
		it.Entry = f.API.Marshal()
	}
	if f.Newest != nil {
		it.Name, it.Newest = f.Newest.Name, f.Newest.Revision
		if f.NewestErr != nil {
			it.Invalid = f.NewestErr.Error()
		}
	}
	return it
}

// latest is the revision a write must name: the key's newest.
func latest(f registry.InForce) uint64 {
	if f.Newest != nil {
		return f.Newest.Revision
	}
	return f.Entry.Revision
}

func (s *Server) listAPIs(w http.ResponseWriter, r *http.Request) {
	all, err := s.c.ListInForce(r.Context())
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	items := make([]APIItem, 0, len(all))
	for _, f := range all {
		it := itemOf(f)
		it.Entry = entryFor(r, it.Entry)
		items = append(items, it)
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}

// getAPI answers the entry in force, as the registry stores it, with its
// revision as the ETag a change names in If-Match.
func (s *Server) getAPI(w http.ResponseWriter, r *http.Request) {
	s.getEntry(w, r, chi.URLParam(r, "name"))
}

// getDraft answers an API's draft (GET /v1/apis/{name}/draft) as getAPI
// answers the API.
func (s *Server) getDraft(w http.ResponseWriter, r *http.Request) {
	s.getEntry(w, r, registry.DraftKey(chi.URLParam(r, "name")))
}

func (s *Server) getEntry(w http.ResponseWriter, r *http.Request, key string) {
	f, err := s.c.GetInForce(r.Context(), key)
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	w.Header().Set("ETag", etag(latest(f)))
	if f.API == nil {
		writeJSON(w, http.StatusConflict, apiError{Code: "NO_VALID_REVISION", Message: "no valid revision of the api is in force: " + f.NewestErr.Error(), Revision: latest(f)})
		return
	}
	writeRaw(w, http.StatusOK, entryFor(r, f.API.Marshal()))
}

// entryFor is an API entry as the request's role may read it: in full
// for an admin, who edits it; below, with the value of every query
// parameter of its URLs (the backend's, each channel's) replaced by "…"
// — a partner's key is often one (the user part of a URL is refused at
// put) — and so the values its request rewrites set or add to the
// backend's headers and query (an Authorization header, an api_key
// parameter). An entry that does not read as JSON is answered as it is.
func entryFor(r *http.Request, raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || role(r) >= registry.RoleAdmin {
		return raw
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return raw
	}
	urls := redactURLQueries(v)
	if rewrites := redactRewriteValues(v); !urls && !rewrites {
		return raw
	}
	b, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return b
}

// redactURLQueries replaces, in a decoded JSON value, the query values
// of every string under a key "url"; true when it changed one.
func redactURLQueries(v any) bool {
	changed := false
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if str, ok := x.(string); ok && k == "url" {
				if red, ok := redactedQuery(str); ok {
					t[k], changed = red, true
				}
				continue
			}
			changed = redactURLQueries(x) || changed
		}
	case []any:
		for _, x := range t {
			changed = redactURLQueries(x) || changed
		}
	}
	return changed
}

// redactRewriteValues replaces with "…" the values of the request
// rewrites' headers and query set and add (rewrite.request, and the
// sandbox tier's); true when it changed one. Names stay: they say what
// the rewrite does.
func redactRewriteValues(v any) bool {
	entry, _ := v.(map[string]any)
	if entry == nil {
		return false
	}
	changed := false
	for _, holder := range []any{entry, entry["sandbox"]} {
		h, _ := holder.(map[string]any)
		rw, _ := h["rewrite"].(map[string]any)
		req, _ := rw["request"].(map[string]any)
		for _, part := range []string{"headers", "query"} {
			p, _ := req[part].(map[string]any)
			for _, op := range []string{"set", "add"} {
				vals, _ := p[op].(map[string]any)
				for name := range vals {
					vals[name], changed = "…", true
				}
			}
		}
	}
	return changed
}

// redactedQuery is raw with each query value "…" (the names kept), and
// its user part and fragment dropped; false when there is nothing to
// hide.
func redactedQuery(raw string) (string, bool) {
	i := strings.IndexAny(raw, "?#")
	u, err := url.Parse(raw)
	if err != nil {
		if i < 0 {
			return raw, false
		}
		return raw[:i] + "?…", true
	}
	if u.RawQuery == "" && u.User == nil && u.Fragment == "" {
		return raw, false
	}
	names := []string{}
	for _, kv := range strings.Split(u.RawQuery, "&") {
		if name, _, _ := strings.Cut(kv, "="); name != "" {
			names = append(names, name+"=…")
		}
	}
	// The path as written (placeholders such as {id} kept unescaped).
	head := raw
	if i >= 0 {
		head = raw[:i]
	}
	if u.User != nil {
		head = u.Scheme + "://" + u.Host + "/…"
	}
	if len(names) == 0 {
		return head, true
	}
	return head + "?" + strings.Join(names, "&"), true
}

// createAPI publishes a new API (POST /v1/apis): 409 when the name exists.
func (s *Server) createAPI(w http.ResponseWriter, r *http.Request) {
	doc, ok := readBody(w, r)
	if !ok {
		return
	}
	a, err := s.client(w, r).Put(r.Context(), doc, registry.IfRevision(0))
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	w.Header().Set("ETag", etag(a.Revision))
	w.Header().Set("Location", "/v1/apis/"+a.Name)
	writeJSON(w, http.StatusCreated, APIItem{Name: a.Name, Revision: a.Revision, Entry: a.Marshal()})
}

// putAPI changes an API at the revision If-Match names, or creates it
// with If-None-Match: *. The body's name must be the path's.
func (s *Server) putAPI(w http.ResponseWriter, r *http.Request) {
	opt, doc, ok := readWrite(w, r)
	if !ok {
		return
	}
	parsed, err := registry.ParseAPI("", doc)
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	if !sameName(w, "entry", chi.URLParam(r, "name"), parsed.Name) {
		return
	}
	a, err := s.client(w, r).Put(r.Context(), doc, opt)
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	w.Header().Set("ETag", etag(a.Revision))
	writeJSON(w, http.StatusOK, APIItem{Name: a.Name, Revision: a.Revision, Entry: a.Marshal()})
}

// putDraft writes an API's draft (PUT /v1/apis/{name}/draft) at the draft
// revision If-Match names, or creates it with If-None-Match: *.
func (s *Server) putDraft(w http.ResponseWriter, r *http.Request) {
	opt, doc, ok := readWrite(w, r)
	if !ok {
		return
	}
	parsed, err := registry.ParseAPI("", doc) // for its name; PutDraft checks it as a draft
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	if !sameName(w, "draft", chi.URLParam(r, "name"), parsed.Name) {
		return
	}
	a, err := s.client(w, r).PutDraft(r.Context(), doc, opt)
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	w.Header().Set("ETag", etag(a.Revision))
	writeJSON(w, http.StatusOK, APIItem{Name: a.StoreKey(), Revision: a.Revision, Entry: a.Marshal()})
}

// deleteAPI unpublishes an API at the revision If-Match names.
func (s *Server) deleteAPI(w http.ResponseWriter, r *http.Request) {
	s.deleteEntry(w, r, chi.URLParam(r, "name"))
}

// deleteDraft removes an API's draft at the revision If-Match names.
func (s *Server) deleteDraft(w http.ResponseWriter, r *http.Request) {
	s.deleteEntry(w, r, registry.DraftKey(chi.URLParam(r, "name")))
}

func (s *Server) deleteEntry(w http.ResponseWriter, r *http.Request, key string) {
	rev, ok := ifMatch(w, r)
	if !ok {
		return
	}
	if err := s.client(w, r).Delete(r.Context(), key, registry.IfRevision(rev)); err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// revision is one kept revision, as the history lists it.
type revision struct {
	Revision uint64          `json:"revision"`
	Op       string          `json:"op"`
	Created  string          `json:"created"`
	Entry    json.RawMessage `json:"entry,omitempty"`
	Invalid  string          `json:"error,omitempty"`
}

func (s *Server) apiRevisions(w http.ResponseWriter, r *http.Request) {
	hs, err := s.c.History(r.Context(), chi.URLParam(r, "name"))
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	out := make([]revision, 0, len(hs))
	for _, h := range hs {
		rv := revision{Revision: h.Revision, Op: h.Op, Created: h.Created}
		if h.Op == "PUT" {
			if json.Valid(h.Value) {
				rv.Entry = entryFor(r, h.Value)
			}
			if _, err := registry.ParseAPI(h.Name, h.Value); err != nil {
				rv.Invalid = err.Error()
			}
		}
		out = append(out, rv)
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": out})
}

// audit answers the trail: ?since= (RFC 3339 or a duration back from
// now), ?kind=, ?limit= (default 100).
func (s *Server) audit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var since time.Time
	if v := q.Get("since"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			since = time.Now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339, v); err == nil {
			since = t
		} else {
			writeError(w, http.StatusBadRequest, "BAD_REQUEST", "since must be RFC 3339 or a duration (24h)")
			return
		}
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			writeError(w, http.StatusBadRequest, "BAD_REQUEST", "limit must be from 1 to 10000")
			return
		}
		limit = n
	}
	changes, err := s.c.Audit(r.Context(), since, q.Get("kind"), limit)
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	if changes == nil {
		changes = []registry.Change{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": changes})
}

// tokenView is a token as the API shows it: never its secret, nor its
// digest.
type tokenView struct {
	ID      string        `json:"id"`
	Name    string        `json:"name"`
	Role    registry.Role `json:"role"`
	Created time.Time     `json:"created"`
	Token   string        `json:"token,omitempty"` // once, when made
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) {
	ts, err := s.c.ListAdminTokens(r.Context())
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	out := make([]tokenView, 0, len(ts))
	for _, t := range ts {
		out = append(out, tokenView{ID: t.ID, Name: t.Name, Role: t.Role, Created: t.Created})
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": out})
}

// createToken makes a token ({"name":…,"role":…}) and shows it once.
func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	doc, ok := readBody(w, r)
	if !ok {
		return
	}
	var in struct {
		Name string `json:"name"`
		Role string `json:"role"`
	}
	if err := json.Unmarshal(doc, &in); err != nil {
		writeError(w, http.StatusBadRequest, "BAD_REQUEST", "the body must be {\"name\":…,\"role\":…}: "+err.Error())
		return
	}
	role, _ := registry.ParseRole(in.Role) // none: refused below, with the name's problem too
	token, t, err := s.client(w, r).CreateAdminToken(r.Context(), in.Name, role)
	if t == nil {
		writeRegistryError(w, err, s.log)
		return
	}
	if err != nil { // made, not audited: say so, but hand the token over
		s.log.Error("admin token made but not audited", "id", t.ID, "err", err)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, tokenView{ID: t.ID, Name: t.Name, Role: t.Role, Created: t.Created, Token: token})
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) {
	if err := s.client(w, r).RevokeAdminToken(r.Context(), chi.URLParam(r, "id")); err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
