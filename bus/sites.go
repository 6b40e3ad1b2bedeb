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
}

// NewSites returns sites with the first one active.
func NewSites(names []string, links []*Link) *Sites {
	s := &Sites{names: names, links: links}
	s.since.Store(time.Now().UnixNano())
	return s
}

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
// is down and another is up, the first such other (the active site is
// not changed: that is the controller's decision).
func (s *Sites) For() *Link {
	a := s.links[s.active.Load()]
	if a.Up() {
		return a
	}
	for _, l := range s.links {
		if l.Up() {
			return l
		}
	}
	return a
}
