package workers

import (
	"net/http"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/backend"
	"github.com/jetway-gw/jetway/registry"
)

func TestJobBackoff(t *testing.T) {
	cfg := &registry.Async{Backoff: registry.Duration(time.Second), MaxBackoff: registry.Duration(10 * time.Second)}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 9: 10 * time.Second} {
		for range 20 {
			if d := jobBackoff(cfg, n, nil); d < want/2 || d > want {
				t.Fatalf("attempt %d: %v, want in [%v, %v]", n, d, want/2, want)
			}
		}
	}
	// A backend's Retry-After is honoured, up to max_backoff.
	ra := &backend.Response{Header: http.Header{"Retry-After": {"7"}}}
	if d := jobBackoff(cfg, 1, ra); d != 7*time.Second {
		t.Fatalf("Retry-After 7: %v", d)
	}
	ra.Header.Set("Retry-After", "3600")
	if d := jobBackoff(cfg, 1, ra); d != 10*time.Second {
		t.Fatalf("Retry-After 3600: %v, want the 10s cap", d)
	}
	now := time.Now()
	if d := retryAfter(now.Add(90*time.Second).UTC().Format(http.TimeFormat), now); d < 88*time.Second || d > 90*time.Second {
		t.Fatalf("Retry-After as a date: %v", d)
	}
	for _, v := range []string{"", "soon", "-5"} {
		if d := retryAfter(v, now); d != 0 {
			t.Fatalf("Retry-After %q: %v", v, d)
		}
	}
}
