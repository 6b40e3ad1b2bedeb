package registry

import (
	"encoding/json"
	"testing"
)

// fuzzEntry checks a registry parser on arbitrary documents: every
// refusal is a *ValidationError (never a panic, never another type), and
// whatever is accepted survives its own round trip.
func fuzzEntry[T any](f *testing.F, key string, seeds []string, parse func(key string, doc []byte) (*T, error)) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		v, err := parse(key, doc)
		if err != nil {
			if _, ok := err.(*ValidationError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parse(key, out); err != nil {
			t.Fatalf("round trip of %s failed: %v", out, err)
		}
	})
}

func FuzzParseApp(f *testing.F) {
	fuzzEntry(f, "shop", []string{
		`{"id":"shop","status":"active","apis":["orders.*"],"ip_allow":["10.0.0.0/8"],"sandbox":true}`,
		`{"id":"shop","status":"disabled","keys":[{"id":"jw_abc","sha256":"` + KeyDigest("k") + `"}],"rate_limit":{"limit":5,"window":"1m"}}`,
		"id: shop\nstatus: active\nhmac_secrets: [{id: hs_1, secret: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA}]\n",
		`{"id":"shop","status":"active","apis":["*>"]}`,
		`{"id":"shop","status":"active","jwt":{"issuer":"https://idp.example","algorithms":["ES256","EdDSA"],"jwks_url":"https://idp.example/jwks","leeway":"10s"}}`,
	}, ParseApp)
}

func FuzzParseDegrade(f *testing.F) {
	fuzzEntry(f, DegradeKey("orders.get"), []string{
		`{"on":true,"reason":"db migration"}`,
		`{"on":true,"status":200,"json":{"items":[]},"headers":{"X-Degraded":"1"}}`,
		`{"on":true,"cached":true,"body":"x","json":1}`,
		"on: false\n",
	}, ParseDegrade)
}

func FuzzParseAlert(f *testing.F) {
	fuzzEntry(f, "slow", []string{
		`{"name":"slow","kind":"p99_above","api":"*","latency":"250ms","window":"1m"}`,
		`{"name":"slow","kind":"success_rate_below","api":"orders.get","threshold":0.99,"min_calls":5}`,
		`{"name":"slow","kind":"no_workers","pool":"orders","webhook":"http://127.0.0.1:1/hook"}`,
	}, ParseAlert)
}
