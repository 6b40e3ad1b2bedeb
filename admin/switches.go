package admin

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// switchKind is one kind of an API's live switch (degrade, fault): how it
// is read, checked, written and cleared. Each is served alike, at its own
// revision: GET gives the ETag, PUT takes If-Match or If-None-Match: *,
// DELETE If-Match.
type switchKind[T any] struct {
	get   func(ctx context.Context, c *registry.Client, api string) (T, error)
	parse func(api string, doc []byte) (T, error)
	set   func(ctx context.Context, c *registry.Client, api string, v T, opt registry.WriteOption) (T, error)
	clear func(ctx context.Context, c *registry.Client, api string, opt registry.WriteOption) error
	rev   func(T) uint64
	json  func(T) []byte
	// adminOnly says why only an admin may write v ("": an operator may):
	// an answer of its own is what every caller of the API gets.
	adminOnly func(v T) string
}

func ownAnswer(st registry.Static) bool {
	return len(st.Headers) > 0 || st.Body != nil || st.JSON != nil
}

var degradeSwitch = switchKind[*registry.Degrade]{
	get: func(ctx context.Context, c *registry.Client, api string) (*registry.Degrade, error) {
		return c.GetDegrade(ctx, api)
	},
	parse: func(api string, doc []byte) (*registry.Degrade, error) {
		return registry.ParseDegrade(registry.DegradeKey(api), doc)
	},
	set: func(ctx context.Context, c *registry.Client, api string, v *registry.Degrade, opt registry.WriteOption) (*registry.Degrade, error) {
		return c.SetDegrade(ctx, api, v, opt)
	},
	clear: func(ctx context.Context, c *registry.Client, api string, opt registry.WriteOption) error {
		return c.ClearDegrade(ctx, api, opt)
	},
	rev:  func(d *registry.Degrade) uint64 { return d.Revision },
	json: func(d *registry.Degrade) []byte { return d.Marshal() },
	adminOnly: func(d *registry.Degrade) string {
		if d.Static.Status != 0 || ownAnswer(d.Static) {
			return "a degrade switch with an answer of its own (status, headers, body)"
		}
		return ""
	},
}

var faultSwitch = switchKind[*registry.Fault]{
	get: func(ctx context.Context, c *registry.Client, api string) (*registry.Fault, error) {
		return c.GetFault(ctx, api)
	},
	parse: func(api string, doc []byte) (*registry.Fault, error) {
		return registry.ParseFault(registry.FaultKey(api), doc, time.Now())
	},
	set: func(ctx context.Context, c *registry.Client, api string, v *registry.Fault, opt registry.WriteOption) (*registry.Fault, error) {
		return c.SetFault(ctx, api, v, opt)
	},
	clear: func(ctx context.Context, c *registry.Client, api string, opt registry.WriteOption) error {
		return c.ClearFault(ctx, api, opt)
	},
	rev:  func(f *registry.Fault) uint64 { return f.Revision },
	json: func(f *registry.Fault) []byte { return f.Marshal() },
	adminOnly: func(f *registry.Fault) string {
		if f.Abort != nil && ownAnswer(f.Abort.Static) {
			return "a fault whose abort has an answer of its own (headers, body)"
		}
		return ""
	},
}

// route adds a switch kind's GET, PUT and DELETE under path.
func (k switchKind[T]) route(s *Server, r chi.Router, path string) {
	r.Get(path, s.need(registry.RoleViewer, func(w http.ResponseWriter, r *http.Request) {
		api, ok := switchAPI(w, r)
		if !ok {
			return
		}
		v, err := k.get(r.Context(), s.c, api)
		var ve *registry.ValidationError
		if errors.As(err, &ve) {
			// Written around Jetway, or under an older schema: the
			// registry's data, not the caller's, is wrong; DELETE clears it.
			w.Header().Set("ETag", etag(ve.Revision))
			writeJSON(w, http.StatusConflict, apiError{Code: "INVALID_STORED", Message: "the stored switch does not validate: " + err.Error(), Revision: ve.Revision})
			return
		}
		if err != nil {
			writeRegistryError(w, err, s.log)
			return
		}
		w.Header().Set("ETag", etag(k.rev(v)))
		writeRaw(w, http.StatusOK, k.json(v))
	}))
	r.Put(path, s.need(registry.RoleOperator, func(w http.ResponseWriter, r *http.Request) {
		api, ok := switchAPI(w, r)
		if !ok {
			return
		}
		opt, doc, ok := readWrite(w, r)
		if !ok {
			return
		}
		v, err := k.parse(api, doc)
		if err != nil {
			writeRegistryError(w, err, s.log)
			return
		}
		if why := k.adminOnly(v); why != "" && role(r) < registry.RoleAdmin {
			writeError(w, http.StatusForbidden, "FORBIDDEN", why+" needs the admin role: every caller of the api gets it")
			return
		}
		set, err := k.set(r.Context(), s.client(w, r), api, v, opt)
		if err != nil {
			writeRegistryError(w, err, s.log)
			return
		}
		w.Header().Set("ETag", etag(k.rev(set)))
		writeRaw(w, http.StatusOK, k.json(set))
	}))
	r.Delete(path, s.need(registry.RoleOperator, func(w http.ResponseWriter, r *http.Request) {
		api, ok := switchAPI(w, r)
		if !ok {
			return
		}
		rev, ok := ifMatch(w, r)
		if !ok {
			return
		}
		var ve *registry.ValidationError
		if _, err := k.get(r.Context(), s.c, api); err != nil && !errors.As(err, &ve) { // one that does not validate is cleared all the same
			writeRegistryError(w, err, s.log)
			return
		}
		if err := k.clear(r.Context(), s.client(w, r), api, registry.IfRevision(rev)); err != nil {
			writeRegistryError(w, err, s.log)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
}

// switchAPI is the API name of a switch's path, checked: false when it
// answered the request.
func switchAPI(w http.ResponseWriter, r *http.Request) (string, bool) {
	api := chi.URLParam(r, "name")
	if err := bus.ValidName(api); err != nil {
		writeError(w, http.StatusBadRequest, "BAD_REQUEST", "api name "+strconv.Quote(api)+": "+err.Error())
		return "", false
	}
	return api, true
}
