package resilience

import (
	"errors"
	"slices"
	"testing"
)

// counter builds numbered values, to tell a kept value from a new one.
type counter struct{ n int }

func (c *counter) build() (int, error) { c.n++; return c.n, nil }

func TestKeptWhileTheSettingsAreUnchanged(t *testing.T) {
	var k Kept[int]
	var c counter
	get := func(fp string) int {
		v, err := k.Get(fp, c.build)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := get("a"); v != 1 {
		t.Fatalf("first Get = %d, want 1", v)
	}
	if v := get("a"); v != 1 {
		t.Errorf("same settings rebuilt: %d", v)
	}
	if v := get("b"); v != 2 {
		t.Errorf("changed settings kept the old value: %d", v)
	}
	if v := get("a"); v != 3 {
		t.Errorf("settings changed back revived a dropped value: %d", v)
	}

	// A failed build leaves what was held, and the next Get tries again.
	boom := errors.New("boom")
	if v, err := k.Get("c", func() (int, error) { return 99, boom }); !errors.Is(err, boom) || v != 3 {
		t.Errorf("failed build = %d, %v; want the held 3 and the error", v, err)
	}
	if v := get("c"); v != 4 {
		t.Errorf("after a failed build: %d, want a new build", v)
	}

	// Forget keeps the value but not its settings; Clear drops both.
	k.Forget()
	if k.Value() != 4 {
		t.Errorf("Forget dropped the value: %d", k.Value())
	}
	if v := get("c"); v != 5 {
		t.Errorf("after Forget the same settings kept the value: %d", v)
	}
	k.Clear()
	if k.Value() != 0 {
		t.Errorf("Clear kept %d", k.Value())
	}
	if v := get("c"); v != 6 {
		t.Errorf("after Clear: %d, want a new build", v)
	}
}

func TestKeptMapRounds(t *testing.T) {
	var m KeptMap[string, int]
	var c counter
	get := func(key, fp string) int {
		v, err := m.Get(key, fp, c.build)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	all := func() []int { return slices.Sorted(m.All()) }

	m.Round()
	a, b := get("x", "1"), get("y", "1")
	m.Round()
	if v := get("x", "1"); v != a {
		t.Errorf("unchanged x rebuilt: %d, want %d", v, a)
	}
	if v := get("y", "2"); v == b {
		t.Errorf("changed y kept %d", v)
	}
	m.Round() // asks for x only: y goes
	get("x", "1")
	if got := all(); !slices.Equal(got, []int{a}) {
		t.Errorf("round holds %v, want [%d]", got, a)
	}
	m.Round()
	if v := get("y", "2"); v <= b+1 {
		t.Errorf("y left a round out and came back with its old value %d", v)
	}

	// A failed build carries nothing into the round.
	m.Round()
	if v, err := m.Get("x", "2", func() (int, error) { return 7, errors.New("boom") }); err == nil || v != 0 {
		t.Errorf("failed build = %d, %v; want 0 and the error", v, err)
	}
	if got := all(); len(got) != 0 {
		t.Errorf("a failed build was carried: %v", got)
	}
}

func TestFingerprintIsTheJSON(t *testing.T) {
	type s struct {
		A int    `json:"a"`
		B string `json:"b,omitempty"`
	}
	if fp := Fingerprint(s{A: 1}); fp != `{"a":1}` {
		t.Errorf("Fingerprint = %s", fp)
	}
	if Fingerprint(s{A: 1}) == Fingerprint(s{A: 1, B: "x"}) {
		t.Error("different settings, one fingerprint")
	}
}
