package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"

	"github.com/go-chi/chi/v5"

	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/report"
)

// alertItem is a stored alert rule with its revision; a rule that does not
// validate is listed with why.
type alertItem struct {
	Name     string          `json:"name"`
	Revision uint64          `json:"revision"`
	Rule     json.RawMessage `json:"rule,omitempty"`
	Invalid  string          `json:"error,omitempty"`
}

// listAlerts answers every rule with its webhook's URL redacted
// (report.RedactedURL: a webhook's path or query often is its key), for
// every role, as the report schedules: the console edits a rule as
// listed, and a PUT that gives the redacted URL back keeps the stored
// one, so no one needs to see it, an admin included.
func (s *Server) listAlerts(w http.ResponseWriter, r *http.Request) {
	all, err := s.c.ListAlerts(r.Context())
	for i, l := range all {
		if l.Err == nil && l.Value != nil {
			all[i].Value = redactedRule(l.Value)
		}
	}
	writeListed(w, s, all, err, func(name string, rev uint64, v json.RawMessage, invalid string) any {
		return alertItem{Name: name, Revision: rev, Rule: v, Invalid: invalid}
	})
}

// redactedRule is a copy of rule with its webhook's URL redacted.
func redactedRule(rule *registry.AlertRule) *registry.AlertRule {
	v := *rule
	if v.Webhook != "" {
		v.Webhook = report.RedactedURL(v.Webhook)
	}
	return &v
}

// keepWebhook makes a rule written with its webhook's redacted URL (as
// listed) keep the stored URL: doc is rewritten with the stored one. A
// redacted URL with nothing to keep — no such rule, no webhook, another
// scheme or host — is refused: it would store the placeholder, or send
// the alerts of a host swapped in to a path that is not its. ok false
// when it answered the request.
func (s *Server) keepWebhook(w http.ResponseWriter, r *http.Request, parsed *registry.AlertRule, doc []byte) ([]byte, bool) {
	if parsed.Webhook == "" || !report.IsRedacted(parsed.Webhook) {
		return doc, true
	}
	all, err := s.c.ListAlerts(r.Context())
	if err != nil {
		writeRegistryError(w, err, s.log)
		return nil, false
	}
	var stored string
	for _, l := range all {
		if l.Key == parsed.Name && l.Err == nil && l.Value != nil {
			stored = l.Value.Webhook
		}
	}
	kept := report.KeptURL(parsed.Webhook, stored)
	if kept == parsed.Webhook {
		writeJSON(w, http.StatusBadRequest, apiError{Code: "INVALID_ENTRY", Message: "the webhook's URL is a redacted one that is not the stored rule's; give the whole URL",
			Problems: []problem{{Path: "webhook", Message: "is redacted (…) and the stored rule has no webhook at this scheme and host to keep: give the whole URL"}}})
		return nil, false
	}
	js, err := registry.ToJSON(doc)
	var m map[string]json.RawMessage
	if err == nil {
		err = json.Unmarshal(js, &m)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "BAD_REQUEST", "the rule does not read as one JSON object")
		return nil, false
	}
	m["webhook"], _ = json.Marshal(kept)
	out, _ := json.Marshal(m)
	return out, true
}

// writeListed answers a list of stored entries, {"items": [...]}, each
// made by item from its key, revision, and the entry as JSON or why it
// does not validate.
func writeListed[T any](w http.ResponseWriter, s *Server, all []registry.Listed[T], err error, item func(name string, rev uint64, v json.RawMessage, invalid string) any) {
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	out := make([]any, 0, len(all))
	for _, l := range all {
		if l.Err != nil {
			out = append(out, item(l.Key, l.Revision, nil, l.Err.Error()))
			continue
		}
		b, _ := json.Marshal(l.Value)
		out = append(out, item(l.Key, l.Revision, b, ""))
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": out})
}

// putAlert writes a rule at the revision If-Match names, or new with
// If-None-Match: *. A rule names a webhook that serve will POST to: an
// admin's to write.
func (s *Server) putAlert(w http.ResponseWriter, r *http.Request) {
	opt, doc, ok := readWrite(w, r)
	if !ok {
		return
	}
	parsed, err := registry.ParseAlert("", doc)
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	if !sameName(w, "rule", chi.URLParam(r, "name"), parsed.Name) {
		return
	}
	if doc, ok = s.keepWebhook(w, r, parsed, doc); !ok {
		return
	}
	rule, err := s.client(w, r).PutAlert(r.Context(), doc, opt)
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	b, _ := json.Marshal(redactedRule(rule))
	w.Header().Set("ETag", etag(rule.Revision))
	writeJSON(w, http.StatusOK, alertItem{Name: rule.Name, Revision: rule.Revision, Rule: b})
}

func (s *Server) deleteAlert(w http.ResponseWriter, r *http.Request) {
	rev, ok := ifMatch(w, r)
	if !ok {
		return
	}
	if err := s.client(w, r).DeleteAlert(r.Context(), chi.URLParam(r, "name"), registry.IfRevision(rev)); err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// setAppAPIs replaces what an app may call ({"apis":["orders.*"]}), live on
// every edge; the app's other fields stay as they are, whoever changes
// them meanwhile.
func (s *Server) setAppAPIs(w http.ResponseWriter, r *http.Request) {
	s.changeApp(w, r, func(doc []byte, a *registry.App) error {
		var in struct {
			APIs []string `json:"apis"`
		}
		if err := json.Unmarshal(doc, &in); err != nil {
			return err
		}
		a.APIs = in.APIs
		return nil
	})
}

// grantApp adds one API glob to what an app may call (POST
// /v1/apps/{id}/grants, {"api":"orders.*"}), and revokeApp takes one away
// (DELETE /v1/apps/{id}/grants/{api}): each a change of the stored list by
// compare-and-set, so two grants at once are both kept.
func (s *Server) grantApp(w http.ResponseWriter, r *http.Request) {
	s.changeApp(w, r, func(doc []byte, a *registry.App) error {
		var in struct {
			API string `json:"api"`
		}
		if err := json.Unmarshal(doc, &in); err != nil || in.API == "" {
			return errors.New(`the body is {"api": "<name, prefix.* or *>"}`)
		}
		if !slices.Contains(a.APIs, in.API) {
			a.APIs = append(a.APIs, in.API)
		}
		return nil
	})
}

func (s *Server) revokeApp(w http.ResponseWriter, r *http.Request) {
	api := chi.URLParam(r, "api")
	s.changeApp(w, r, func(_ []byte, a *registry.App) error {
		a.APIs = slices.DeleteFunc(a.APIs, func(g string) bool { return g == api })
		return nil
	})
}

// setAppLimit sets an app's own rate limit ({"limit":100,"window":"1s"}),
// or none ({"limit":0}).
func (s *Server) setAppLimit(w http.ResponseWriter, r *http.Request) {
	s.changeApp(w, r, func(doc []byte, a *registry.App) error {
		var in registry.AppLimit
		if err := json.Unmarshal(doc, &in); err != nil {
			return err
		}
		a.RateLimit = nil
		if in.Limit > 0 {
			a.RateLimit = &in
		}
		return nil
	})
}

// changeApp applies change (with the request's body) to the stored app by
// compare-and-set, retried on a fresh read (registry.UpdateApp); the app
// as changed is validated before it is written.
func (s *Server) changeApp(w http.ResponseWriter, r *http.Request, change func(doc []byte, a *registry.App) error) {
	doc, ok := readBody(w, r)
	if !ok {
		return
	}
	var bad error
	a, err := s.client(w, r).UpdateApp(r.Context(), chi.URLParam(r, "id"), func(a *registry.App) error {
		if err := change(doc, a); err != nil {
			bad = err
			return err
		}
		return nil
	})
	if bad != nil {
		writeError(w, http.StatusBadRequest, "BAD_REQUEST", "the body does not read: "+bad.Error())
		return
	}
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	w.Header().Set("ETag", etag(a.Revision))
	writeJSON(w, http.StatusOK, viewOf(a))
}
