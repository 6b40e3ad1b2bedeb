package push

import (
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/bus"
)

func TestParseCursor(t *testing.T) {
	for in, want := range map[string]string{"7": ":7", "12:7": "12:7", "0": ":0", "1796172429048:18446744073709551615": "1796172429048:18446744073709551615"} {
		c, err := ParseCursor(in)
		if err != nil || c.String() != want {
			t.Errorf("%q: %v %v", in, c, err)
		}
	}
	for _, bad := range []string{"", ":", "a", "1:", ":1", "1:2:3", "-1", "1:-2", "+1", "18446744073709551616", " 1", "1 ", "١"} {
		if _, err := ParseCursor(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"1", "1:2", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCursor(s)
		if err != nil {
			return
		}
		// What parses prints as a cursor that parses to itself.
		if c.Epoch == "" {
			return // printed ":SEQ", which a client never sends
		}
		again, err := ParseCursor(c.String())
		if err != nil || again != c {
			t.Fatalf("%q: %v printed %q, read back %v %v", s, c, c.String(), again, err)
		}
	})
}

// An address survives the subject: every id, whatever its bytes, comes
// back from a push subject as it went in, and never spills into another
// token.
func TestSubjectRoundTrip(t *testing.T) {
	for _, c := range []struct{ topic, app, id string }{
		{"orders", "shop", "d1"},
		{"a.b", "partner.x", "dev.ice"},
		{"a", "~x", "_"},
		{"a", "x y", "*"},
		{"a", strings.Repeat("z", 65), ">"},
		{"a", "ü", "\x00"},
	} {
		p := bus.PushDurable
		subj := p.Subject(c.topic, kindDev, c.app, c.id, "k.k")
		if strings.ContainsAny(strings.TrimPrefix(subj, p.Prefix), " *>\x00") {
			t.Errorf("%q: a wildcard or space in the subject", subj)
		}
		kind, app, id, ok := parseSubject(subj, p.TopicPrefix(c.topic))
		if !ok || kind != kindDev || app != c.app || id != c.id {
			t.Errorf("%+v: %q gave %s %q %q %v", c, subj, kind, app, id, ok)
		}
	}
	// Topic a's subjects never cover topic a.b's.
	for _, p := range []bus.PushStore{bus.PushDurable, bus.PushLatest} {
		if strings.HasPrefix(p.Subject("a.b", kindAll, "", "", ""), p.TopicPrefix("a")) {
			t.Error("topic a's prefix covers topic a.b")
		}
	}
	// The two stores never share a subject.
	if strings.HasPrefix(bus.PushLatest.Prefix, bus.PushDurable.Prefix) || strings.HasPrefix(bus.PushDurable.Prefix, bus.PushLatest.Prefix) {
		t.Error("the push stores' prefixes overlap")
	}
}
