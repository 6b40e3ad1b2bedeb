package edge

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// appIndex finds apps by the digest of an API key. Built once per
// snapshot; read-only afterwards.
type appIndex struct {
	byKey map[string]*authApp
	byID  map[string]*authApp
}

type authApp struct {
	app   *registry.App
	allow []netip.Prefix // the app's own client address list; empty: any
}

func newAppIndex(apps map[string]*registry.App) *appIndex {
	ix := &appIndex{byKey: map[string]*authApp{}, byID: map[string]*authApp{}}
	for _, a := range apps {
		allow, _ := registry.ParsePrefixes(a.IPAllow) // validated at publish
		aa := &authApp{app: a, allow: allow}
		ix.byID[a.ID] = aa
		for _, k := range a.Keys {
			ix.byKey[k.SHA256] = aa
		}
	}
	return ix
}

// apiKey takes the caller's API key from X-Api-Key or "Authorization:
// ApiKey <key>", and removes it from the headers: credentials are never
// passed on to backends.
func apiKey(h http.Header) string {
	key := h.Get("X-Api-Key")
	delete(h, "X-Api-Key")
	if auth := h.Get("Authorization"); strings.HasPrefix(auth, "ApiKey ") {
		delete(h, "Authorization")
		if key == "" {
			key = strings.TrimSpace(strings.TrimPrefix(auth, "ApiKey "))
		}
	}
	return key
}

// authenticate finds the app calling an API that requires one — by its API
// key, or by a bearer token the API's JWT settings accept — or answers 401
// UNAUTHENTICATED / 403 FORBIDDEN itself and returns false.
func (ix *appIndex) authenticate(w http.ResponseWriter, r *http.Request, rt *route, addr netip.Addr, id string) (*registry.App, bool) {
	var aa *authApp
	key := apiKey(r.Header)
	bearer, hasBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch {
	case key != "" && rt.api.Auth.Has("key"):
		aa = ix.byKey[registry.KeyDigest(key)]
		if aa == nil || aa.app.Status != registry.AppActive {
			writeError(w, bus.CodeUnauthenticated, "unknown or disabled API key", id)
			return nil, false
		}
	case hasBearer && rt.api.Auth.Has("jwt"):
		if rt.jwt == nil {
			writeError(w, bus.CodeUnauthenticated, "tokens for api "+rt.api.Name+" cannot be checked now (its keys did not load)", id)
			return nil, false
		}
		appID, err := rt.jwt.verify(strings.TrimSpace(bearer))
		if err != nil {
			writeError(w, bus.CodeUnauthenticated, "invalid token: "+err.Error(), id)
			return nil, false
		}
		aa = ix.byID[appID]
		if aa == nil || aa.app.Status != registry.AppActive {
			writeError(w, bus.CodeUnauthenticated, "the token names no active app", id)
			return nil, false
		}
		delete(r.Header, "Authorization") // credentials never reach backends
	default:
		w.Header().Set("WWW-Authenticate", `ApiKey realm="jetway", Bearer realm="jetway"`)
		writeError(w, bus.CodeUnauthenticated, "api "+rt.api.Name+" needs credentials ("+strings.Join(rt.api.Auth.Methods, " or ")+")", id)
		return nil, false
	}
	if rt.api.Auth.OnlyGranted() && !aa.app.Granted(rt.api.Name) {
		writeError(w, bus.CodeForbidden, "app "+aa.app.ID+" is not granted api "+rt.api.Name, id)
		return nil, false
	}
	if len(aa.allow) > 0 && !contains(aa.allow, addr) {
		writeError(w, bus.CodeForbidden, "app "+aa.app.ID+" may not call from this address", id)
		return nil, false
	}
	return aa.app, true
}
