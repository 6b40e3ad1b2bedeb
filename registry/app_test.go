package registry

import (
	"strings"
	"testing"
)

func TestParseAppProblems(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want []string // substrings of the error; none: valid
	}{
		{`{"id":"shop","status":"active","sandbox":true,"jwt":{"issuer":"https://idp.example","algorithms":["ES256"],"jwks_url":"https://idp.example/jwks"}}`, nil},
		{`{"id":"shop","status":"active","jwt":{"algorithms":["ES256"],"jwks_file":"/k.json"}}`, []string{"jwt.issuer: is required"}},
		{`{"id":"shop","status":"active","jwt":{"issuer":"i","algorithms":["none"],"jwks_file":"/k.json","app_claim":"sub"}}`,
			[]string{"jwt.algorithms", "never none", "jwt.app_claim: is not used"}},
		{`{"id":"shop","status":"active","jwt":{"issuer":"i","algorithms":["RS256"]}}`, []string{"jwt: give one of jwks_file or jwks_url"}},
		{`{"id":"shop","status":"maybe","apis":["a*b"],"ip_allow":["nope"]}`, []string{"status", "apis", "ip_allow"}},
	} {
		_, err := ParseApp("shop", []byte(tc.doc))
		switch {
		case len(tc.want) == 0 && err != nil:
			t.Errorf("%s: %v", tc.doc, err)
		case len(tc.want) > 0 && err == nil:
			t.Errorf("%s: accepted", tc.doc)
		}
		for _, w := range tc.want {
			if err != nil && !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v does not mention %q", tc.doc, err, w)
			}
		}
	}
}
