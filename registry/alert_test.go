package registry

import (
	"errors"
	"strings"
	"testing"
)

// channel_cut takes an API (or "*") like breaker_opened, and nothing else.
func TestParseAlertChannelCut(t *testing.T) {
	for _, doc := range []string{`{"name":"cuts","kind":"channel_cut","api":"sms"}`, `{"name":"cuts","kind":"channel_cut","api":"*","webhook":"https://hooks.example/x"}`,
		`{"name":"cuts","kind":"release_rolled_back","api":"*"}`} {
		r, err := ParseAlert("cuts", []byte(doc))
		if err != nil || (r.Kind != AlertChannelCut && r.Kind != AlertReleaseRolledBack) {
			t.Errorf("%s: %+v, %v", doc, r, err)
		}
	}
	for doc, want := range map[string]string{
		`{"name":"cuts","kind":"channel_cut"}`:                           "api: is required",
		`{"name":"cuts","kind":"channel_cut","api":"a b"}`:               "api: must be dot-separated",
		`{"name":"cuts","kind":"channel_cut","api":"sms","channel":"b"}`: "unknown field",
		`{"name":"cuts","kind":"release_rolled_back"}`:                   "api: is required",
		`{"name":"cuts","kind":"channel_cuts","api":"sms"}`:              "breaker_opened, channel_cut, release_rolled_back, no_workers",
	} {
		_, err := ParseAlert("cuts", []byte(doc))
		var ve *ValidationError
		if err == nil || !strings.Contains(err.Error(), want) || !errors.As(err, &ve) {
			t.Errorf("%s: %v, want a validation error with %q", doc, err, want)
		}
	}
}
