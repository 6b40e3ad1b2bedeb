package bus

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// `jetway nodes` prints a beat's version, host and admin address to the
// operator's terminal. Any node of a role may forge its role's beats, so a
// compromised edge could put terminal escape sequences there (clear the
// screen, retitle the window, hide rows, or worse with some emulators).
// The texts of a received beat hold no control characters.
func TestTrackerStripsControlCharacters(t *testing.T) {
	s := natstest.RunServer(t)
	tr := startTracker(t, natstest.Connect(t, s), time.Hour)
	nc := natstest.Connect(t, s)
	esc := "v1\x1b[2J\x1b]0;pwned\x07\r\n\u009b31m\xff"
	b, _ := json.Marshal(Heartbeat{ID: "e", Role: "edge", Version: esc, Host: esc, Admin: esc})
	if err := nc.Publish(HeartbeatSubject("edge", "e"), b); err != nil {
		t.Fatal(err)
	}
	natstest.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if tr.Live("", time.Now()) == 0 {
			return errors.New("beat not seen yet")
		}
		return nil
	})
	hb := tr.Nodes(time.Now())[0]
	for _, s := range []string{hb.Version, hb.Host, hb.Admin} {
		if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
			t.Errorf("text %q has a control character at %d", s, i)
		}
		if !strings.HasPrefix(s, "v1") {
			t.Errorf("text %q lost its printable start", s)
		}
	}
}
