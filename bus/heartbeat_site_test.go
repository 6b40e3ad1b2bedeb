package bus

import "testing"

// A beat's site is an edge's (or serve's), primary or standby; anything
// else a peer claims is dropped.
func TestTrackerKeepsOnlyAnEdgesSite(t *testing.T) {
	for _, c := range []struct {
		role, site, want string
	}{
		{"edge", "standby", "standby"}, {"serve", "primary", "primary"},
		{"edge", "mars", ""}, {"worker", "standby", ""}, {"edge", "", ""},
	} {
		if hb := trackOne(t, Heartbeat{ID: "n1", Role: c.role, Site: c.site}); hb.Site != c.want {
			t.Errorf("%s beating site %q: kept %q, want %q", c.role, c.site, hb.Site, c.want)
		}
	}
}
