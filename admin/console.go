package admin

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"strings"

	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/schemas"
)

//go:embed console
var consoleFiles embed.FS

// Console serves the browser console (admin/console: plain HTML, CSS and
// JavaScript modules, embedded) under /console/. Its files hold no secret
// and are served to anyone; everything it shows comes from /v1/ with the
// token the operator gives it, kept in the tab's session storage only.
// The policy lets scripts come from here alone (no inline script, no
// other origin) and no page frame it; 'unsafe-eval' is for the schema
// validator, which compiles the entry schema into a function.
func Console() http.Handler {
	sub, _ := fs.Sub(consoleFiles, "console")
	files := http.StripPrefix("/console/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/console" {
			http.Redirect(w, r, "/console/", http.StatusMovedPermanently)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self' 'unsafe-eval'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// apiSchema answers the JSON Schema of API entries (GET /v1/schemas/api),
// which the console validates an edit against before saving.
func (s *Server) apiSchema(w http.ResponseWriter, _ *http.Request) {
	writeRaw(w, http.StatusOK, schemas.APISchemaJSON)
}

// DegradeItem is a degrade switch that is on, as GET /v1/degrade lists it:
// the switch, or why its stored value does not validate.
type DegradeItem struct {
	API      string          `json:"api"`
	Revision uint64          `json:"revision"`
	Switch   json.RawMessage `json:"switch,omitempty"`
	Invalid  string          `json:"error,omitempty"`
}

// listDegrade answers the degrade switches that are on (GET /v1/degrade).
func (s *Server) listDegrade(w http.ResponseWriter, r *http.Request) {
	all, err := s.c.ListDegrade(r.Context())
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	items := []DegradeItem{}
	for _, l := range all {
		it := DegradeItem{API: strings.TrimPrefix(l.Key, registry.DegradePrefix), Revision: l.Revision}
		if l.Err != nil {
			it.Invalid = l.Err.Error()
		} else if !l.Value.On {
			continue
		} else {
			it.Switch = l.Value.Marshal()
		}
		items = append(items, it)
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}
