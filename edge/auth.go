package edge

import (
	"context"
	"crypto/hmac"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"slices"
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
	byKey      map[string]*authApp
	byID       map[string]*authApp
	byIssuer   map[string]*authApp // apps with their own token issuer (App.JWT)
	byCertName map[string]*authApp // App.CertNames
	nonces     NonceStore
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
	ix := &appIndex{byKey: map[string]*authApp{}, byID: map[string]*authApp{}, byIssuer: map[string]*authApp{},
		byCertName: map[string]*authApp{}, nonces: e.o.Nonces}
	shared := map[string]bool{}
	sharedName := map[string]bool{}
	for _, a := range apps {
		allow, _ := registry.ParsePrefixes(a.IPAllow) // validated at publish
		aa := &authApp{app: a, allow: allow, limit: e.appLimiter(a)}
		ix.byID[a.ID] = aa
		for _, k := range a.Keys {
			ix.byKey[k.SHA256] = aa
		}
		for _, n := range a.CertNames {
			if other := ix.byCertName[n]; (other != nil && other != aa) || sharedName[n] {
				// Two apps, one name: a certificate could be either's.
				e.log.Error("two apps name the same certificate name; certificates with it are refused", "name", n, "app", a.ID)
				delete(ix.byCertName, n)
				sharedName[n] = true
				continue
			}
			ix.byCertName[n] = aa
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

// hasAPIKey reports whether the headers carry an API key (apiKey), leaving
// them as they are.
func hasAPIKey(h http.Header) bool {
	if h.Get("X-Api-Key") != "" {
		return true
	}
	rest, ok := CutAuthScheme(h.Get("Authorization"), "ApiKey")
	return ok && strings.TrimSpace(rest) != ""
}

// AuthPolicy is how an API that requires an authenticated app knows its
// callers: the methods it accepts, the snapshot's apps, its token checks.
// Built once per snapshot, read-only afterwards; nil for an open API.
type AuthPolicy struct {
	api  *registry.API // its name and Auth settings
	apps *appIndex
	jwt  *jwtVerifier   // the API's token checks; nil: none (or its keys did not load)
	mtls *x509.CertPool // the CA client certificates must chain to; nil: none (or it did not load)
}

// Caller is what Authenticate needs of a caller besides its request.
type Caller struct {
	// Addr is the client's address (clientAddr), checked against the
	// app's own address list.
	Addr netip.Addr
	// Path is the escaped path as the caller sent it, which a signed
	// request signs; "" means r.URL.RawPath.
	Path string
	// Body is the request body, whole, for a signed request (its digest
	// is signed); unread otherwise.
	Body []byte
}

// Authenticate finds the app calling an API under policy p — by its API
// key, by a bearer token the API's or the app's own issuer signed, or by a
// signed request — and checks that the app may call: the API's grant, the
// app's own address list and rate limit. It writes nothing: a refusal is
// an *Error (401 UNAUTHENTICATED, 403 FORBIDDEN, 429 RATE_LIMITED, 503
// BUS_UNAVAILABLE when the nonce store cannot be reached), for the caller
// to send on whatever transport it speaks. Credentials are removed from
// r.Header: they never reach backends. When the app is known but refused,
// it is returned with the error, so that its refusals count as its own.
// A nil policy (an open API) admits everyone as no app: nil, nil.
func Authenticate(r *http.Request, p *AuthPolicy, c Caller) (*registry.App, error) {
	if p == nil {
		return nil, nil
	}
	aa, err := p.identify(r, c)
	if err != nil {
		return nil, err
	}
	return aa.app, p.grant(aa, c.Addr)
}

// signed reports whether a request is a signed one the API accepts (its
// body must then be read before identify, for the digest). On an API
// without hmac a signature header is just a credential it does not take:
// no body is read for it before the grant and the limits.
func (p *AuthPolicy) signed(r *http.Request) bool {
	return p.api.Auth.Has("hmac") && hasScheme(r.Header.Get("Authorization"), sign.Scheme)
}

// unauthenticated is a 401 refusal.
func unauthenticated(msg string) *Error { return &Error{Code: bus.CodeUnauthenticated, Message: msg} }

// method is the method of the API's that the request's credentials are
// for: "hmac", "key", "jwt" or "mtls", in that order of preference; "":
// none it takes.
func (p *AuthPolicy) method(r *http.Request) string {
	switch {
	case p.signed(r):
		return "hmac"
	case p.api.Auth.Has("key") && hasAPIKey(r.Header):
		return "key"
	case p.api.Auth.Has("jwt") && hasScheme(r.Header.Get("Authorization"), "Bearer"):
		return "jwt"
	case p.api.Auth.Has("mtls") && r.TLS != nil && len(r.TLS.PeerCertificates) > 0:
		return "mtls"
	}
	return ""
}

// identify finds the app calling: the first half of Authenticate.
func (p *AuthPolicy) identify(r *http.Request, c Caller) (*authApp, error) {
	return p.identifyBy(p.method(r), r, c)
}

// identifyBy is identify by the method the request's credentials are for
// (AuthPolicy.method).
func (p *AuthPolicy) identifyBy(method string, r *http.Request, c Caller) (*authApp, error) {
	ix := p.apps
	var aa *authApp
	key := apiKey(r.Header) // taken off the request, whichever method is used
	authz := r.Header.Get("Authorization")
	switch method {
	case "hmac": // a signed request
		var err error
		if aa, err = ix.verifySigned(r, c, authz); err != nil {
			return nil, err
		}
		delete(r.Header, "Authorization")
	case "key":
		aa = ix.byKey[registry.KeyDigest(key)]
		if aa == nil || aa.app.Status != registry.AppActive {
			return nil, unauthenticated("unknown or disabled API key")
		}
	case "jwt":
		bearer, _ := CutAuthScheme(authz, "Bearer")
		token := strings.TrimSpace(bearer)
		v := p.jwt
		if own := ix.issuerApp(token); own != nil {
			v = own.jwt // an app's own issuer: only its settings and keys
			if v == nil {
				return nil, unauthenticated("tokens of app " + own.app.ID + "'s issuer cannot be checked now (its keys did not load)")
			}
		}
		if v == nil {
			return nil, unauthenticated("tokens for api " + p.api.Name + " cannot be checked now (no issuer settings, or its keys did not load)")
		}
		appID, err := v.verify(token)
		if err != nil {
			return nil, unauthenticated("invalid token: " + err.Error())
		}
		aa = ix.byID[appID]
		if aa == nil || aa.app.Status != registry.AppActive {
			return nil, unauthenticated("the token names no active app")
		}
		delete(r.Header, "Authorization") // credentials never reach backends
	case "mtls":
		var err error
		if aa, err = p.clientCertApp(r.TLS.PeerCertificates); err != nil {
			return nil, err
		}
	default:
		e := unauthenticated("api " + p.api.Name + " needs credentials (" + strings.Join(p.api.Auth.Methods, " or ") + ")")
		e.Challenge = `ApiKey realm="jetway", Bearer realm="jetway"`
		return nil, e
	}
	return aa, nil
}

// clientCertApp is the app a TLS client certificate names: the chain must
// lead to the API's CA, be valid now and be for client authentication;
// then its subject common name, DNS, URI or email SANs name the app (the
// first that one does).
func (p *AuthPolicy) clientCertApp(chain []*x509.Certificate) (*authApp, error) {
	if p.mtls == nil {
		return nil, unauthenticated("client certificates for api " + p.api.Name + " cannot be checked now (its CA did not load)")
	}
	leaf := chain[0]
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: p.mtls, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return nil, unauthenticated("client certificate refused: " + err.Error())
	}
	// Its SANs name it; the common name only when it has none (RFC 6125).
	names := append(slices.Clone(leaf.DNSNames), leaf.EmailAddresses...)
	for _, u := range leaf.URIs {
		names = append(names, u.String())
	}
	if len(names) == 0 {
		names = []string{leaf.Subject.CommonName}
	}
	var found *authApp
	for _, n := range names {
		aa := p.apps.byCertName[n]
		if n == "" || aa == nil {
			continue
		}
		if found != nil && found != aa {
			return nil, unauthenticated("the client certificate names more than one app")
		}
		found = aa
	}
	switch {
	case found == nil:
		return nil, unauthenticated("the client certificate names no app")
	case !chainHas(chains, found.app.CertCA):
		// Another partner's CA, trusted by the API too, signed a name
		// that is not its own.
		return nil, unauthenticated("the client certificate is not signed by app " + found.app.ID + "'s CA")
	case found.app.Status != registry.AppActive:
		return nil, unauthenticated("the client certificate names a disabled app")
	}
	return found, nil
}

// chainHas reports whether a verified chain holds the certificate with
// the fingerprint.
func chainHas(chains [][]*x509.Certificate, fingerprint string) bool {
	for _, ch := range chains {
		for _, c := range ch[1:] {
			if registry.CertFingerprint(c.Raw) == fingerprint {
				return true
			}
		}
	}
	return false
}

// grant checks that a known app may call the API, from its address, now:
// the second half of Authenticate.
func (p *AuthPolicy) grant(aa *authApp, addr netip.Addr) error {
	if p.api.Auth.OnlyGranted() && !aa.app.Granted(p.api.Name) {
		return &Error{Code: bus.CodeForbidden, Message: "app " + aa.app.ID + " is not granted api " + p.api.Name}
	}
	if len(aa.allow) > 0 && !contains(aa.allow, addr) {
		return &Error{Code: bus.CodeForbidden, Message: "app " + aa.app.ID + " may not call from this address"}
	}
	if aa.limit != nil {
		if d := aa.limit.Take(time.Now(), 0); !d.Allowed {
			return &Error{Code: bus.CodeRateLimited, Message: "app " + aa.app.ID + " is over its own rate limit", RetryAfter: retryAfterSecs(d.RetryAfter)}
		}
	}
	return nil
}

// maxSkew is how far a signed request's timestamp may be from the edge's clock.
const maxSkew = 5 * time.Minute

// verifySigned checks a JW1-HMAC-SHA256 request: the app's secret signs it,
// its timestamp is within ±5 minutes, and its nonce was never used on any
// edge in the last 10 minutes. The nonce store unreachable → refused (fail
// closed) with 503.
func (ix *appIndex) verifySigned(r *http.Request, c Caller, authz string) (*authApp, error) {
	p, err := sign.Parse(authz)
	if err != nil {
		return nil, unauthenticated("bad signature header: " + err.Error())
	}
	aa := ix.byID[p.App]
	if aa == nil || aa.app.Status != registry.AppActive || len(aa.app.HMACSecrets) == 0 {
		return nil, unauthenticated("unknown or disabled app, or no signing secret")
	}
	ts, err := strconv.ParseInt(p.TS, 10, 64)
	if err != nil || time.Since(time.Unix(ts, 0)).Abs() > maxSkew {
		return nil, unauthenticated("signature timestamp missing or more than 5 minutes off")
	}
	path := c.Path
	if path == "" {
		path = r.URL.RawPath
	}
	s := sign.StringToSign(r.Method, path, r.URL.RawQuery, p.TS, p.Nonce, c.Body, p.Headers, r.Header)
	valid := false
	for _, sec := range aa.app.HMACSecrets {
		if hmac.Equal([]byte(sign.MAC(sec.Bytes(), s)), []byte(p.Sig)) {
			valid = true
		}
	}
	if !valid {
		return nil, unauthenticated("signature does not match")
	}
	if ix.nonces == nil {
		return nil, &Error{Code: bus.CodeBusUnavailable, Message: "nonce store not configured: signed requests are refused"}
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	switch err := ix.nonces.Claim(ctx, p.App+"."+p.Nonce, time.Unix(ts, 0)); {
	case errors.Is(err, registry.ErrReplay):
		return nil, unauthenticated("nonce already used (replay)")
	case errors.Is(err, registry.ErrSignedBeforeLoss):
		return nil, unauthenticated("signed before the replay record was lost; sign again")
	case err != nil:
		return nil, &Error{Code: bus.CodeBusUnavailable, Message: "nonce store unreachable: signed requests are refused"}
	}
	return aa, nil
}
