package bus

import (
	"strings"
	"testing"
	"unicode"
)

// `jetway nodes` prints a beat's version, host and admin address to the
// operator's terminal. Any node of a role may forge its role's beats, so a
// compromised edge could put terminal escape sequences there (clear the
// screen, retitle the window, hide rows, or worse with some emulators).
// The texts of a received beat hold no control characters.
func TestTrackerStripsControlCharacters(t *testing.T) {
	esc := "v1\x1b[2J\x1b]0;pwned\x07\r\n\u009b31m\xff"
	hb := trackOne(t, Heartbeat{ID: "e", Role: "edge", Version: esc, Host: esc, Admin: esc})
	for _, s := range []string{hb.Version, hb.Host, hb.Admin} {
		if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
			t.Errorf("text %q has a control character at %d", s, i)
		}
		if !strings.HasPrefix(s, "v1") {
			t.Errorf("text %q lost its printable start", s)
		}
	}
}
