package edge

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/resilience"
	"github.com/jetway-gw/jetway/sign"
)

// appIndex finds apps by the digest of an API key. Built once per
// snapshot; read-only afterwards.
type appIndex struct {
	byKey    map[string]*authApp
	byID     map[string]*authApp
	byIssuer map[string]*authApp // apps with their own token issuer (App.JWT)
	nonces   NonceStore
}

// NonceStore claims signed requests' nonces for the whole cluster
// (registry.NonceStore) for a request signed at signed; Claim returns
// registry.ErrReplay for a nonce seen before, registry.ErrSignedBeforeLoss
// for a request signed before the store lost its record of nonces, and
// another error when the store cannot be reached.
type NonceStore interface {
	Claim(ctx context.Context, key string, signed time.Time) error
}

type authApp struct {
	app   *registry.App
	allow []netip.Prefix     // the app's own client address list; empty: any
	limit resilience.Limiter // the app's own rate limit; nil: none
	jwt   *jwtVerifier       // the app's own issuer's checks; nil: none (or its keys did not load)
}

// newAppIndex indexes a snapshot's apps. verifier returns the checks of an
// app's own token issuer (nil when its keys do not load).
func (e *Edge) newAppIndex(apps map[string]*registry.App, verifier func(a *registry.App) *jwtVerifier) *appIndex {
	ix := &appIndex{byKey: map[string]*authApp{}, byID: map[string]*authApp{}, byIssuer: map[string]*authApp{}, nonces: e.o.Nonces}
	shared := map[string]bool{}
	for _, a := range apps {
		allow, _ := registry.ParsePrefixes(a.IPAllow) // validated at publish
		aa := &authApp{app: a, allow: allow, limit: e.appLimiter(a)}
		ix.byID[a.ID] = aa
		for _, k := range a.Keys {
			ix.byKey[k.SHA256] = aa
		}
		if a.JWT != nil {
			aa.jwt = verifier(a)
			if other := ix.byIssuer[a.JWT.Issuer]; other != nil || shared[a.JWT.Issuer] {
				// Two apps, one issuer: a token could be either's.
				// Neither gets the issuer's tokens until that is fixed.
				e.log.Error("two apps name the same token issuer; its tokens are refused", "issuer", a.JWT.Issuer, "app", a.ID)
				delete(ix.byIssuer, a.JWT.Issuer)
				shared[a.JWT.Issuer] = true
				continue
			}
			ix.byIssuer[a.JWT.Issuer] = aa
		}
	}
	return ix
}

// issuerApp returns the app whose own issuer the token names (its iss
// claim, read unverified: only that app's keys can then verify it), or nil.
func (ix *appIndex) issuerApp(token string) *authApp {
	if len(ix.byIssuer) == 0 {
		return nil
	}
	_, rest, ok := strings.Cut(token, ".")
	payload, _, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || len(payload) > 16<<10 {
		return nil
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return nil
	}
	var claims struct {
		Iss string `json:"iss"`
	}
	if json.Unmarshal(b, &claims) != nil || claims.Iss == "" {
		return nil
	}
	return ix.byIssuer[claims.Iss]
}

// CutAuthScheme reads an Authorization value of the given scheme: the
// scheme name matched case-insensitively and one or more spaces after it
// (RFC 7235 §2.1: credentials = auth-scheme 1*SP token68/params), so
// "bearer  x" is "Bearer x". It returns the credentials after the spaces,
// and false for another scheme or a scheme with nothing after it.
func CutAuthScheme(authz, scheme string) (string, bool) {
	if len(authz) <= len(scheme) || authz[len(scheme)] != ' ' || !strings.EqualFold(authz[:len(scheme)], scheme) {
		return "", false
	}
	return strings.TrimLeft(authz[len(scheme):], " "), true
}

// hasScheme reports whether an Authorization value is of the scheme, as
// CutAuthScheme reads it.
func hasScheme(authz, scheme string) bool {
	_, ok := CutAuthScheme(authz, scheme)
	return ok
}

// apiKey takes the caller's API key from X-Api-Key or "Authorization:
// ApiKey <key>", and removes it from the headers: credentials are never
// passed on to backends.
func apiKey(h http.Header) string {
	key := h.Get("X-Api-Key")
	delete(h, "X-Api-Key")
	if rest, ok := CutAuthScheme(h.Get("Authorization"), "ApiKey"); ok {
		delete(h, "Authorization")
		if key == "" {
			key = strings.TrimSpace(rest)
		}
	}
	return key
}

// maxSkew is how far a signed request's timestamp may be from the edge's clock.
const maxSkew = 5 * time.Minute

// verifySigned checks a JW1-HMAC-SHA256 request: the app's secret signs it,
// its timestamp is within ±5 minutes, and its nonce was never used on any
// edge in the last 10 minutes. The nonce store unreachable → refused (fail
// closed) with 503.
func (ix *appIndex) verifySigned(w http.ResponseWriter, r *http.Request, rt *route, id, authz string, body []byte) (*authApp, bool) {
	p, err := sign.Parse(authz)
	if err != nil {
		writeError(w, bus.CodeUnauthenticated, "bad signature header: "+err.Error(), id)
		return nil, false
	}
	aa := ix.byID[p.App]
	if aa == nil || aa.app.Status != registry.AppActive || len(aa.app.HMACSecrets) == 0 {
		writeError(w, bus.CodeUnauthenticated, "unknown or disabled app, or no signing secret", id)
		return nil, false
	}
	ts, err := strconv.ParseInt(p.TS, 10, 64)
	if err != nil || time.Since(time.Unix(ts, 0)).Abs() > maxSkew {
		writeError(w, bus.CodeUnauthenticated, "signature timestamp missing or more than 5 minutes off", id)
		return nil, false
	}
	s := sign.StringToSign(r.Method, sentPath(w, r), r.URL.RawQuery, p.TS, p.Nonce, body, p.Headers, r.Header)
	valid := false
	for _, sec := range aa.app.HMACSecrets {
		if hmac.Equal([]byte(sign.MAC(sec.Bytes(), s)), []byte(p.Sig)) {
			valid = true
		}
	}
	if !valid {
		writeError(w, bus.CodeUnauthenticated, "signature does not match", id)
		return nil, false
	}
	if ix.nonces == nil {
		writeError(w, bus.CodeBusUnavailable, "nonce store not configured: signed requests are refused", id)
		return nil, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	switch err := ix.nonces.Claim(ctx, p.App+"."+p.Nonce, time.Unix(ts, 0)); {
	case errors.Is(err, registry.ErrReplay):
		writeError(w, bus.CodeUnauthenticated, "nonce already used (replay)", id)
		return nil, false
	case errors.Is(err, registry.ErrSignedBeforeLoss):
		writeError(w, bus.CodeUnauthenticated, "signed before the replay record was lost; sign again", id)
		return nil, false
	case err != nil:
		writeError(w, bus.CodeBusUnavailable, "nonce store unreachable: signed requests are refused", id)
		return nil, false
	}
	return aa, true
}

// authenticate finds the app calling an API that requires one — by its API
// key, or by a bearer token the API's JWT settings accept — or answers 401
// UNAUTHENTICATED / 403 FORBIDDEN itself and returns false.
func (ix *appIndex) authenticate(w http.ResponseWriter, r *http.Request, rt *route, addr netip.Addr, id string, body *bytes.Buffer) (*registry.App, bool) {
	var aa *authApp
	key := apiKey(r.Header)
	authz := r.Header.Get("Authorization")
	bearer, hasBearer := CutAuthScheme(authz, "Bearer")
	switch {
	case body != nil && rt.api.Auth.Has("hmac"): // a signed request (its body was read for the digest)
		var ok bool
		if aa, ok = ix.verifySigned(w, r, rt, id, authz, body.Bytes()); !ok {
			return nil, false
		}
		delete(r.Header, "Authorization")
	case key != "" && rt.api.Auth.Has("key"):
		aa = ix.byKey[registry.KeyDigest(key)]
		if aa == nil || aa.app.Status != registry.AppActive {
			writeError(w, bus.CodeUnauthenticated, "unknown or disabled API key", id)
			return nil, false
		}
	case hasBearer && rt.api.Auth.Has("jwt"):
		token := strings.TrimSpace(bearer)
		v := rt.jwt
		if own := ix.issuerApp(token); own != nil {
			v = own.jwt // an app's own issuer: only its settings and keys
			if v == nil {
				writeError(w, bus.CodeUnauthenticated, "tokens of app "+own.app.ID+"'s issuer cannot be checked now (its keys did not load)", id)
				return nil, false
			}
		}
		if v == nil {
			writeError(w, bus.CodeUnauthenticated, "tokens for api "+rt.api.Name+" cannot be checked now (no issuer settings, or its keys did not load)", id)
			return nil, false
		}
		appID, err := v.verify(token)
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
	markApp(w, aa.app.ID) // known from here on: its refusals count as its own
	if rt.api.Auth.OnlyGranted() && !aa.app.Granted(rt.api.Name) {
		writeError(w, bus.CodeForbidden, "app "+aa.app.ID+" is not granted api "+rt.api.Name, id)
		return nil, false
	}
	if len(aa.allow) > 0 && !contains(aa.allow, addr) {
		writeError(w, bus.CodeForbidden, "app "+aa.app.ID+" may not call from this address", id)
		return nil, false
	}
	if aa.limit != nil {
		if d := aa.limit.Take(time.Now(), 0); !d.Allowed {
			secs := int64((d.RetryAfter + time.Second - 1) / time.Second)
			w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
			writeError(w, bus.CodeRateLimited, "app "+aa.app.ID+" is over its own rate limit", id)
			return nil, false
		}
	}
	return aa.app, true
}
