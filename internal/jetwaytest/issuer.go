package jetwaytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// Issuer is a token issuer for tests: an ES256 key whose JWKS is in File
// (kid k1), and Iss, the issuer tokens name.
type Issuer struct {
	Iss  string
	File string
	key  *ecdsa.PrivateKey
	t    testing.TB
}

// NewIssuer makes an issuer named iss, its JWKS written in a temp dir.
func NewIssuer(t testing.TB, iss string) *Issuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	jwks, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "EC", "kid": "k1", "crv": "P-256",
		"x": b64(key.X.FillBytes(make([]byte, 32))), "y": b64(key.Y.FillBytes(make([]byte, 32)))}}})
	f := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(f, jwks, 0o600); err != nil {
		t.Fatal(err)
	}
	return &Issuer{Iss: iss, File: f, key: key, t: t}
}

// Token signs a token of the issuer with these claims (iss is added).
func (i *Issuer) Token(claims jwt.MapClaims) string {
	i.t.Helper()
	c := jwt.MapClaims{"iss": i.Iss}
	maps.Copy(c, claims)
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, c)
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString(i.key)
	if err != nil {
		i.t.Fatal(err)
	}
	return s
}
