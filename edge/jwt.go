package edge

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/jetway-gw/jetway/registry"
)

// jwtVerifier checks bearer tokens for one API: signature by a key of its
// JWKS (matched by kid), an allowed algorithm (never "none"; HMAC and
// public-key algorithms are never confused: each key only verifies its own
// kind), exp required, nbf, iss and aud checked with a small leeway.
type jwtVerifier struct {
	parser   *jwt.Parser
	appClaim string

	// keys: kid → key ("" for a JWKS whose keys have no kid). From a file,
	// loaded once; from a URL, fetched in the background and refreshed.
	keys     atomic.Pointer[map[string]any]
	url      string
	fetched  atomic.Int64 // Unix nanoseconds of the last fetch attempt
	fetching atomic.Bool
}

// JWKS refresh policy for jwks_url.
const (
	jwksRefresh    = 5 * time.Minute  // refresh known keys this often
	jwksMinRefetch = 30 * time.Second // an unknown kid refetches at most this often
	jwksTimeout    = 5 * time.Second
)

func newJWTVerifier(c *registry.JWTAuth) (*jwtVerifier, error) {
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(c.Algorithms),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(c.LeewayOrDefault()),
		jwt.WithStrictDecoding(),
	}
	if c.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(c.Issuer))
	}
	if c.Audience != "" {
		opts = append(opts, jwt.WithAudience(c.Audience))
	}
	claim := c.AppClaim
	if claim == "" {
		claim = "sub"
	}
	v := &jwtVerifier{parser: jwt.NewParser(opts...), appClaim: claim, url: c.JWKSURL}
	if c.JWKSURL != "" {
		v.refresh() // in the background: Apply never waits on the network
		return v, nil
	}
	keys, err := loadJWKS(c.JWKSFile)
	if err != nil {
		return nil, err
	}
	v.keys.Store(&keys)
	return v, nil
}

// refresh fetches the JWKS URL in the background, one fetch at a time.
// A failed fetch keeps the keys we had.
func (v *jwtVerifier) refresh() {
	if v.url == "" || !v.fetching.CompareAndSwap(false, true) {
		return
	}
	v.fetched.Store(time.Now().UnixNano())
	go func() {
		defer v.fetching.Store(false)
		client := &http.Client{Timeout: jwksTimeout}
		resp, err := client.Get(v.url)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return
		}
		if keys, err := parseJWKS(v.url, b); err == nil {
			v.keys.Store(&keys)
		}
	}()
}

// key finds a key by kid, refreshing a URL's keys when they are old or
// the kid is unknown.
func (v *jwtVerifier) key(kid string) (any, bool) {
	last := time.Unix(0, v.fetched.Load())
	keys := v.keys.Load()
	if keys == nil {
		if time.Since(last) > time.Second {
			v.refresh()
		}
		return nil, false
	}
	if time.Since(last) > jwksRefresh {
		v.refresh()
	}
	k, ok := (*keys)[kid]
	if !ok && time.Since(last) > jwksMinRefetch {
		v.refresh()
	}
	return k, ok
}

// verify returns the app id a valid token maps to.
func (v *jwtVerifier) verify(token string) (string, error) {
	claims := jwt.MapClaims{}
	_, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		key, ok := v.key(kid)
		if !ok {
			return nil, fmt.Errorf("no key %q", kid)
		}
		// The key's own kind must fit the algorithm's family.
		switch key.(type) {
		case []byte:
			if _, ok := t.Method.(*jwt.SigningMethodHMAC); !ok {
				return nil, errors.New("an HMAC key cannot verify " + t.Method.Alg())
			}
		case *rsa.PublicKey:
			switch t.Method.(type) {
			case *jwt.SigningMethodRSA, *jwt.SigningMethodRSAPSS:
			default:
				return nil, errors.New("an RSA key cannot verify " + t.Method.Alg())
			}
		case *ecdsa.PublicKey:
			if _, ok := t.Method.(*jwt.SigningMethodECDSA); !ok {
				return nil, errors.New("an EC key cannot verify " + t.Method.Alg())
			}
		case ed25519.PublicKey:
			if _, ok := t.Method.(*jwt.SigningMethodEd25519); !ok {
				return nil, errors.New("an Ed25519 key cannot verify " + t.Method.Alg())
			}
		}
		return key, nil
	})
	if err != nil {
		return "", err
	}
	app, _ := claims[v.appClaim].(string)
	if app == "" {
		return "", fmt.Errorf("no %q claim naming the app", v.appClaim)
	}
	return app, nil
}

// jwk is one key of a JWKS (RFC 7517), of the kinds Jetway verifies with.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
	K   string `json:"k"`
}

// loadJWKS reads a JWKS file into keys by kid.
func loadJWKS(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading jwks: %w", err)
	}
	return parseJWKS(path, b)
}

// parseJWKS reads a JWKS document; every key of it must be valid.
func parseJWKS(path string, b []byte) (map[string]any, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("parsing jwks %s: %w", path, err)
	}
	keys := map[string]any{}
	for i, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		key, err := k.key()
		if err != nil {
			return nil, fmt.Errorf("jwks %s key %d (%q): %w", path, i, k.Kid, err)
		}
		keys[k.Kid] = key
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("jwks %s has no signing keys", path)
	}
	return keys, nil
}

func b64(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

func (k jwk) key() (any, error) {
	switch k.Kty {
	case "RSA":
		n, err1 := b64(k.N)
		e, err2 := b64(k.E)
		if err := errors.Join(err1, err2); err != nil || len(n) < 256 {
			return nil, errors.New("bad or short RSA key (2048 bits at least)")
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, nil
	case "EC":
		curves := map[string]elliptic.Curve{"P-256": elliptic.P256(), "P-384": elliptic.P384(), "P-521": elliptic.P521()}
		c, ok := curves[k.Crv]
		x, err1 := b64(k.X)
		y, err2 := b64(k.Y)
		if !ok || errors.Join(err1, err2) != nil {
			return nil, errors.New("bad EC key")
		}
		pub := &ecdsa.PublicKey{Curve: c, X: new(big.Int).SetBytes(x), Y: new(big.Int).SetBytes(y)}
		if _, err := pub.ECDH(); err != nil { // checks the point is on the curve
			return nil, errors.New("EC point not on the curve")
		}
		return pub, nil
	case "OKP":
		x, err := b64(k.X)
		if k.Crv != "Ed25519" || err != nil || len(x) != ed25519.PublicKeySize {
			return nil, errors.New("bad Ed25519 key")
		}
		return ed25519.PublicKey(x), nil
	case "oct":
		secret, err := b64(k.K)
		if err != nil || len(secret) < 32 {
			return nil, errors.New("bad or short HMAC secret (32 bytes at least)")
		}
		return secret, nil
	}
	return nil, fmt.Errorf("key type %q not supported", k.Kty)
}
