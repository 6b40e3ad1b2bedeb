package edge

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// Drafts (registry/draft.go) at the edge. A draft is routed for sandbox
// apps only:
//
//   - on its API's own route (the same method, host and path), as that
//     route's draft: a sandbox app goes to it instead of the sandbox tier,
//     once it has passed the production entry's authentication or, when
//     that fails or the API is open, the draft's own. The draft's methods,
//     grants and address rules then apply too, so what passes here passes
//     after promote;
//   - anywhere else (a new API, or a moved route), on a route of its own
//     that answers every caller but a sandbox app as if nothing were
//     published there.
//
// Production apps never reach a draft, and a draft's answer says which
// revision served it (X-Jetway-Draft), so a test knows what it tested.

// routeDrafts compiles the snapshot's drafts into the router, beside the
// routed production APIs (prod, by name), and returns how many routes it
// added.
func (e *Edge) routeDrafts(s *registry.Snapshot, rtr *router, prod map[string]*route, apps *appIndex, maxPayload int64) int {
	drafts, lost := s.RoutedDrafts()
	for name, holder := range lost {
		e.log.Warn("route conflict; draft not routed", "draft", registry.DraftKey(name), "held_by", holder)
	}
	n := 0
	// The drafts' own routes, by mux and path: one handler a path, for
	// every method, picks the draft of the request's method.
	type pathKey struct {
		mux  *chi.Mux
		path string
	}
	own := map[pathKey]map[string]http.HandlerFunc{}
	var order []pathKey
	for _, d := range drafts {
		dr := e.compileRoute(s, d, apps, maxPayload)
		dr.revision = strconv.FormatUint(d.Revision, 10)
		if dr.respCache != nil {
			rtr.caches[d.Name] = append(rtr.caches[d.Name], dr.respCache)
		}
		if base := prod[d.Name]; base != nil && base.api.Route == d.Route {
			base.draft = dr
			continue
		}
		if holder := meeting(prod, d.Route); holder != "" {
			// Only a production write that raced the draft's, or entries
			// written around the registry client, get here.
			e.log.Warn("route conflict; draft not routed", "draft", d.StoreKey(), "held_by", holder)
			continue
		}
		dr.draftOnly = true
		k := pathKey{rtr.muxOf(d.Route.Host), d.Route.Path}
		if own[k] == nil {
			own[k] = map[string]http.HandlerFunc{}
			order = append(order, k)
		}
		own[k][d.Route.Method] = e.handler(dr)
	}
	for _, k := range order {
		byMethod := own[k]
		// Every method, so that no 405 tells a caller a draft is there:
		// a method no draft of the path has is answered as no route.
		h := func(w http.ResponseWriter, r *http.Request) {
			if f := byMethod[r.Method]; f != nil {
				f(w, r)
			} else if f := byMethod["*"]; f != nil {
				f(w, r)
			} else {
				notFound(w, r)
			}
		}
		if err := addRoute(k.mux, "*", k.path, h); err != nil {
			e.log.Warn("route rejected; drafts not routed", "path", k.path, "err", err)
			continue
		}
		n += len(byMethod)
	}
	return n
}

// meeting names a routed production API whose route meets r (some
// request could match both), if any: a draft's own route must take no
// production call, and production apps would get its 404.
func meeting(prod map[string]*route, r registry.Route) string {
	r.Method = "*" // it is routed for every method
	for name, rt := range prod {
		if rt.api.Route.Meets(r) {
			return name
		}
	}
	return ""
}

// draftCaller lets a sandbox app reach the draft d of an API whose own
// authentication did not find one (it is open, or the credentials are of a
// method only the draft takes). It reports whether it found one; the
// caller puts back the credentials otherwise (credentials.restore).
func (c *call) draftCaller(d *route) bool {
	if d.auth == nil || d.auth.method(c.r) == "" {
		return false // no credentials it takes
	}
	if err := c.identify(d.auth); err != nil || !c.app.app.Sandbox {
		c.app = nil
		return false
	}
	c.viaDraft = true
	return true
}

// draftRechecks reports whether the draft's policy checks again the
// credentials production's found the sandbox app by (checkDraftCredentials).
func (c *call) draftRechecks(d *route) bool {
	return d.auth != nil && (c.method == "jwt" || c.method == "mtls") && d.api.Auth.Has(c.method)
}

// checkDraftCredentials has the draft's own policy check the credentials
// production's found a sandbox app by, when it takes their method: a token
// of an issuer, or a certificate of a CA, the draft no longer trusts is
// refused here as it would be once the draft is promoted. (Keys and
// signing secrets are the app's, whatever the API; a signed request is not
// checked twice, for its nonce is spent.)
func (c *call) checkDraftCredentials(d *route) error {
	found := c.app
	aa, err := d.auth.identifyBy(c.method, c.r, Caller{Addr: c.addr, Path: c.sentPath})
	if err != nil {
		return err
	}
	if aa != found {
		return c.refuse(bus.CodeUnauthenticated, "the draft of api "+d.api.Name+" finds another app in these credentials")
	}
	return nil
}

// admitDraft checks a sandbox app against the draft it goes to: the
// draft's own methods (when production's authentication found it), grants
// and address rules.
func (c *call) admitDraft(d *route) error {
	if !c.viaDraft && !d.api.Auth.Has(c.method) {
		return c.refuse(bus.CodeUnauthenticated, "the draft of api "+d.api.Name+" does not take "+c.method+" credentials ("+strings.Join(d.api.Auth.Methods, " or ")+")")
	}
	if d.ipRules != nil && !d.ipRules.Allows(c.addr) {
		return c.refuse(bus.CodeForbidden, "client address not allowed for the draft of api "+d.api.Name)
	}
	if d.api.Auth.OnlyGranted() && !c.app.app.Granted(d.api.Name) {
		return c.refuse(bus.CodeForbidden, "app "+c.app.app.ID+" is not granted api "+d.api.Name)
	}
	return nil
}

// notPublished is the answer of a draft's own route to a caller that is
// not a sandbox app: that of a path with no API.
func (c *call) notPublished() error {
	return c.refuse(bus.CodeRouteNotFound, "no api is published at "+c.r.Method+" "+c.r.URL.EscapedPath())
}

// markDraft tells a sandbox app which draft revision answers, as the
// response is written: over any X-Jetway-Draft a backend or a cached
// answer brought.
func (c *call) markDraft() {
	if c.rt != nil && c.rt.revision != "" && c.sandboxApp() {
		c.Header()["X-Jetway-Draft"] = []string{c.rt.revision}
	}
}

// credentials are the request headers that carry credentials, kept aside
// so that an authentication that took them off (apiKey, identifyBy) can
// be undone for another one.
type credentials struct{ key, authz []string }

func saveCredentials(h map[string][]string) credentials {
	return credentials{key: h["X-Api-Key"], authz: h["Authorization"]}
}

func (cr credentials) restore(h map[string][]string) {
	for k, v := range map[string][]string{"X-Api-Key": cr.key, "Authorization": cr.authz} {
		if v != nil {
			h[k] = v
		} else {
			delete(h, k)
		}
	}
}
