package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/jetway-gw/jetway/registry"
)

// AppView is an app as the API shows it: never a key digest nor a
// signing secret, only how many it has.
type AppView struct {
	ID             string             `json:"id"`
	Name           string             `json:"name,omitempty"`
	Status         string             `json:"status"`
	APIs           []string           `json:"apis,omitempty"`
	IPAllow        []string           `json:"ip_allow,omitempty"`
	RateLimit      *registry.AppLimit `json:"rate_limit,omitempty"`
	Sandbox        bool               `json:"sandbox,omitempty"`
	CertNames      []string           `json:"cert_names,omitempty"`
	JWTIssuer      string             `json:"jwt_issuer,omitempty"`
	Keys           int                `json:"keys"`
	SigningSecrets int                `json:"signing_secrets"`
	Revision       uint64             `json:"revision"`
	// The secrets made by this request, shown this once.
	Key           string `json:"key,omitempty"`
	SigningSecret string `json:"signing_secret,omitempty"`
}

func viewOf(a *registry.App) AppView {
	v := AppView{ID: a.ID, Name: a.Name, Status: a.Status, APIs: a.APIs, IPAllow: a.IPAllow, RateLimit: a.RateLimit,
		Sandbox: a.Sandbox, CertNames: a.CertNames, Keys: len(a.Keys), SigningSecrets: len(a.HMACSecrets), Revision: a.Revision}
	if a.JWT != nil {
		v.JWTIssuer = a.JWT.Issuer
	}
	return v
}

func (s *Server) listApps(w http.ResponseWriter, r *http.Request) {
	all, err := s.c.ListApps(r.Context())
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	out := make([]AppView, 0, len(all))
	for _, l := range all {
		if l.Err == nil {
			v := viewOf(l.Value)
			v.Revision = l.Revision
			out = append(out, v)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": out})
}

func (s *Server) getApp(w http.ResponseWriter, r *http.Request) {
	a, err := s.c.GetApp(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	w.Header().Set("ETag", etag(a.Revision))
	writeJSON(w, http.StatusOK, viewOf(a))
}

// createApp makes an app with a fresh key (and a signing secret with
// "signing_secret": true), shown in this answer only. Credentials in the
// body are refused: Jetway makes them.
func (s *Server) createApp(w http.ResponseWriter, r *http.Request) {
	doc, ok := readBody(w, r)
	if !ok {
		return
	}
	var in struct {
		registry.App
		WithSecret bool `json:"signing_secret"`
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "BAD_REQUEST", "the body is an app's fields (id, name, apis, …, signing_secret): "+err.Error())
		return
	}
	if len(in.Keys) > 0 || len(in.HMACSecrets) > 0 {
		writeJSON(w, http.StatusBadRequest, apiError{Code: "INVALID_ENTRY", Message: "credentials are made by Jetway, never given",
			Problems: []problem{{Path: "keys", Message: "leave out keys and hmac_secrets: the answer has the new key (and secret)"}}})
		return
	}
	key, secret, a, err := s.client(w, r).CreateApp(r.Context(), &in.App, in.WithSecret)
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	v := viewOf(a)
	v.Key, v.SigningSecret = key, secret
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("ETag", etag(a.Revision))
	w.Header().Set("Location", "/v1/apps/"+a.ID)
	writeJSON(w, http.StatusCreated, v)
}

// rotateKey and rotateSecret give an app one new credential of the kind,
// shown in this answer only; the others stop working at once.
func (s *Server) rotateKey(w http.ResponseWriter, r *http.Request) {
	key, a, err := s.client(w, r).RotateAppKey(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	v := viewOf(a)
	v.Key = key
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) rotateSecret(w http.ResponseWriter, r *http.Request) {
	secret, a, err := s.client(w, r).RotateAppSecret(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	v := viewOf(a)
	v.SigningSecret = secret
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, v)
}

// setAppStatus enables or disables an app ({"status":"active"|"disabled"}),
// live on every edge.
func (s *Server) setAppStatus(w http.ResponseWriter, r *http.Request) {
	s.changeApp(w, r, func(doc []byte, a *registry.App) error {
		var in struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(doc, &in); err != nil || (in.Status != registry.AppActive && in.Status != registry.AppDisabled) {
			return errors.New(`the body is {"status": ` + strconv.Quote(registry.AppActive) + " or " + strconv.Quote(registry.AppDisabled) + "}")
		}
		a.Status = in.Status
		return nil
	})
}
