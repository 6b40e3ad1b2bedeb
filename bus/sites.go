package bus

import (
	"sync/atomic"
	"time"
)

// Sites are a node's NATS clusters in order of preference — the primary,
// then a standby (a second cluster with its own workers and a mirror of
// the primary's registry) — each followed by its Link. Calls go to the
// active one (Use sets it); a call that finds the active site down
// while another is up goes there (For), so that calls do not wait for
// the decision to move.
type Sites struct {
	names  []string
	links  []*Link
	active atomic.Int32
	since  atomic.Int64 // unix ns of the last move
	pinned atomic.Bool  // the active site was told: calls go nowhere else
}

// siteGrace is how long the active site's link must have been down
// before a new call goes to another site: a node of the active cluster
// restarting is not a reason to send calls to another cluster.
const siteGrace = 500 * time.Millisecond

// NewSites returns sites with the first one active. Each link hands a
// request it cannot carry back to be sent to another site when one is up
// (Link.Request returns ErrLinkLost or ErrNotConnected at once).
func NewSites(names []string, links []*Link) *Sites {
	s := &Sites{names: names, links: links}
	s.since.Store(time.Now().UnixNano())
	for _, l := range links {
		other := func() bool { return !s.pinned.Load() && s.otherUp(l) != nil }
		l.other.Store(&other)
	}
	return s
}

// Elsewhere is the link of another site than l's that is up, for a call
// l could not carry (nil: none, or the active site is pinned).
func (s *Sites) Elsewhere(l *Link) *Link {
	if s.pinned.Load() {
		return nil
	}
	return s.otherUp(l)
}

// otherUp is the first site's link, other than l, that is up (nil: none).
func (s *Sites) otherUp(l *Link) *Link {
	for _, o := range s.links {
		if o != l && o.Up() {
			return o
		}
	}
	return nil
}

// Pin says whether the active site was told (Use with a pin): For then
// never sends a call elsewhere.
func (s *Sites) Pin(on bool) { s.pinned.Store(on) }

// Len is the number of sites.
func (s *Sites) Len() int { return len(s.links) }

// Name and Link are site i's.
func (s *Sites) Name(i int) string { return s.names[i] }

// Link is site i's link.
func (s *Sites) Link(i int) *Link { return s.links[i] }

// Active is the site calls go to, and since when.
func (s *Sites) Active() (int, time.Time) {
	return int(s.active.Load()), time.Unix(0, s.since.Load())
}

// Use makes site i the active one; it reports whether that was a move.
func (s *Sites) Use(i int) bool {
	if int(s.active.Swap(int32(i))) == i {
		return false
	}
	s.since.Store(time.Now().UnixNano())
	return true
}

// For is the link a call goes out on: the active site's, or, while it
// has been down for siteGrace and another is up, the first such other
// (the active site is not changed: that is the controller's decision).
// A pinned site is always the one.
func (s *Sites) For() *Link {
	a := s.links[s.active.Load()]
	if a.Up() || s.pinned.Load() {
		return a
	}
	if _, _, since := a.State(); time.Since(since) < siteGrace {
		return a
	}
	if o := s.otherUp(a); o != nil {
		return o
	}
	return a
}
