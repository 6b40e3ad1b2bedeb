package registry

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Shape is the route's path with parameter names erased: /a/{id} and /a/{x}
// match the same requests, so they are one route.
func (r Route) Shape() string {
	var b strings.Builder
	p := r.Path
	for {
		i := strings.IndexByte(p, '{')
		if i < 0 {
			b.WriteString(p)
			return b.String()
		}
		j := strings.IndexByte(p[i:], '}')
		if j < 0 {
			b.WriteString(p)
			return b.String()
		}
		b.WriteString(p[:i])
		b.WriteString("{}")
		p = p[i+j+1:]
	}
}

// String is the route as logs and errors show it, e.g. "GET /v1/hello/{}",
// or "GET api.example.com/v1/hello/{}" for a route with a host.
func (r Route) String() string { return r.Method + " " + r.Host + r.Shape() }

// Overlaps reports whether two routes claim some of the same requests: the
// same host, the same shape, and the same method or "*" on either side
// (the router gives a "*" route every method of its path, the one it was
// added over too). Different shapes never do: the router prefers a literal
// segment over a parameter and a parameter over a catch-all, whatever the
// order; nor do different hosts: the router prefers an exact host over a
// wildcard, a longer wildcard over a shorter one, any host over none.
func (r Route) Overlaps(o Route) bool {
	return r.Host == o.Host && r.Shape() == o.Shape() && (r.Method == o.Method || r.Method == "*" || o.Method == "*")
}

// claimOrder orders APIs by their claim on a route: the one created first
// comes first. Created survives the API's own edits and rollbacks, and
// comes from the entries alone, so every node — watching live, starting
// fresh from KV or from its local snapshot file — orders them alike.
// Revision and name only break ties that Client.Put never writes.
func claimOrder(a, b *API) int {
	return cmp.Or(cmp.Compare(a.Created, b.Created), cmp.Compare(a.Revision, b.Revision), strings.Compare(a.Name, b.Name))
}

// SortByClaim orders APIs as the route table takes them: the first of
// several APIs claiming one route holds it.
func SortByClaim(apis []*API) { slices.SortStableFunc(apis, claimOrder) }

// Conflicts decides which APIs get their routes: taken in claim order, an
// API whose route overlaps one already taken is not routed. It returns, by
// name, each API left without a route and the API holding it.
func Conflicts(apis []*API) map[string]string {
	sorted := slices.Clone(apis)
	SortByClaim(sorted)
	held := map[string][]*API{} // routed APIs by route shape
	out := map[string]string{}
	for _, a := range sorted {
		shape := a.Route.Shape()
		if i := slices.IndexFunc(held[shape], func(h *API) bool { return h.Route.Overlaps(a.Route) }); i >= 0 {
			out[a.Name] = held[shape][i].Name
			continue
		}
		held[shape] = append(held[shape], a)
	}
	return out
}

// RouteConflictError refuses a write that would leave an API without its
// route: the entry's own (it is held by another API) or another API's
// (the entry would take it over).
type RouteConflictError struct {
	API    string // the API being written
	Route  Route  // its route
	HeldBy string // the API that holds the route and keeps it (draft.<name> for a draft)
	// Route of HeldBy, which overlaps Route.
	HeldRoute Route
}

func (e *RouteConflictError) Error() string {
	return fmt.Sprintf("route %s %s of %s is held by api %s (%s %s); "+
		"nothing was written: change the route, or delete %s first",
		e.Route.Method, e.Route.Path, e.API, e.HeldBy, e.HeldRoute.Method, e.HeldRoute.Path, e.HeldBy)
}

// checkRoutes refuses to write next (the new value of an API) into the APIs
// in force if any API would lose its route by it: next itself, or an API
// that holds a route now. inForce is one view of them by name
// (ProductionView, SandboxView) and includes next's current value, if any.
func checkRoutes(inForce map[string]*API, next *API) error {
	var others []*API
	for name, a := range inForce {
		if name != next.Name {
			others = append(others, a)
		}
	}
	now := slices.Clone(others)
	if cur := inForce[next.Name]; cur != nil {
		now = append(now, cur)
	}
	before := Conflicts(now)
	after := Conflicts(append(others, next))
	if holder, ok := after[next.Name]; ok {
		return &RouteConflictError{API: next.StoreKey(), Route: next.Route, HeldBy: inForce[holder].StoreKey(), HeldRoute: inForce[holder].Route}
	}
	for name, holder := range after {
		if _, was := before[name]; !was && holder == next.Name {
			// next would take the route of an API that holds it now. (If
			// any API loses its route, the first of them in claim order
			// loses it to next.)
			return &RouteConflictError{API: next.StoreKey(), Route: next.Route, HeldBy: inForce[name].StoreKey(), HeldRoute: inForce[name].Route}
		}
	}
	return nil
}

// Meets reports whether some request could match both routes: their
// methods overlap, their hosts can be one host (one of them has none, or a
// wildcard covers the other), and their paths can be one path (a
// parameter takes any one segment, a catch-all any rest). Two routes that
// meet without overlapping are routed apart, the more specific first: a
// literal segment before a parameter, a host before none.
func (r Route) Meets(o Route) bool {
	if r.Method != o.Method && r.Method != "*" && o.Method != "*" {
		return false
	}
	return hostsMeet(routeHost(r.Host), routeHost(o.Host)) && pathsMeet(r.Path, o.Path)
}

func hostsMeet(a, b string) bool {
	if a == "" || b == "" || a == b {
		return true
	}
	covers := func(wild, h string) bool {
		suffix, ok := strings.CutPrefix(wild, "*")
		return ok && strings.HasSuffix(h, suffix)
	}
	return covers(a, b) || covers(b, a)
}

func pathsMeet(a, b string) bool {
	as, bs := strings.Split(a, "/"), strings.Split(b, "/")
	for i := 0; ; i++ {
		if i >= len(as) || i >= len(bs) {
			return len(as) == len(bs)
		}
		x, y := as[i], bs[i]
		switch {
		case x == "*" || y == "*":
			return true
		case strings.HasPrefix(x, "{") || strings.HasPrefix(y, "{"):
			if x == "" || y == "" {
				return false // a parameter takes no empty segment
			}
		case x != y:
			return false
		}
	}
}
