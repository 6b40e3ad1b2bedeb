package edge

import (
	"strconv"
	"strings"

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
		if holder := overlapping(prod, d.Route); holder != "" {
			// Only a production write that raced the draft's, or entries
			// written around the registry client, get here.
			e.log.Warn("route conflict; draft not routed", "draft", d.StoreKey(), "held_by", holder)
			continue
		}
		dr.draftOnly = true
		if err := addRoute(rtr.muxOf(d.Route.Host), d.Route.Method, d.Route.Path, e.handler(dr)); err != nil {
			e.log.Warn("route rejected; draft not routed", "draft", d.StoreKey(), "err", err)
			continue
		}
		n++
	}
	return n
}

// overlapping names the routed production API whose route overlaps r, if
// any.
func overlapping(prod map[string]*route, r registry.Route) string {
	for name, rt := range prod {
		if rt.api.Route.Overlaps(r) {
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

// markDraft tells the caller which draft revision answers.
func (c *call) markDraft() {
	if c.rt.revision != "" {
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
