package registry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/schemas"
)

// A draft is a full API entry kept beside the production one, in the APIs
// bucket under DraftKey(name): the API as it will be once promoted. Only
// apps marked sandbox reach it, on the sandbox subject space (API.Subject),
// with its own limits, metrics and breaker (API.Key is "<name>@draft");
// production apps never do, whatever its route. Its saved cases are run
// against it (jetway api test --draft) and Client.Promote then copies it to
// the production entry by compare-and-set.
//
// Routes: sandbox apps see the registry with each draft in place of its
// API (SandboxView). A draft may take no route another API holds, in
// production or in that view, and on its API's route it must name the
// route exactly as the API does (the edge hands it the API's parameters);
// a production write may take no route another API's draft holds. So
// promoting can only fail for what changed since the draft was written
// (or for entries written around the client).

// DraftPrefix begins the key of every draft; no API name may begin with it.
const DraftPrefix = "draft."

// DraftKey is the key the draft of the API name is stored under.
func DraftKey(name string) string { return DraftPrefix + name }

// IsDraft reports whether a is a draft (read from a key under DraftPrefix,
// or written by PutDraft).
func (a *API) IsDraft() bool { return a.draft }

// ForSandbox reports whether a serves sandbox apps alone: a sandbox tier
// (SandboxAPI) or a draft.
func (a *API) ForSandbox() bool { return a.sandbox || a.draft }

// StoreKey is the key a is stored under: its name, or DraftKey(name).
func (a *API) StoreKey() string {
	if a.draft {
		return DraftKey(a.Name)
	}
	return a.Name
}

// ProductionView is the APIs in force (by store key) as production routes
// them, by name: the drafts left out.
func ProductionView(inForce map[string]*API) map[string]*API {
	out := make(map[string]*API, len(inForce))
	for _, a := range inForce {
		if !a.draft {
			out[a.Name] = a
		}
	}
	return out
}

// SandboxView is the APIs in force (by store key) as sandbox apps see them,
// by name: each draft in place of its API. A draft holds its API's claim on
// routes (the earlier of the two created revisions), so a draft that keeps
// its API's route never loses it to a newer API.
func SandboxView(inForce map[string]*API) map[string]*API {
	out := ProductionView(inForce)
	for _, d := range inForce {
		if d.draft {
			out[d.Name] = asViewed(d, out[d.Name])
		}
	}
	return out
}

// asViewed is the draft d as it claims routes in the sandbox view over
// base, its API in production (nil: none).
func asViewed(d, base *API) *API {
	if base == nil || base.draft || base.Created >= d.Created {
		return d
	}
	v := *d
	v.Created = base.Created
	return &v
}

// checkViews refuses to write next (an API or a draft, not yet with its
// revision) if an API would lose its route by it, in production or in the
// sandbox view.
func checkViews(inForce map[string]*API, next *API) error {
	prodView := ProductionView(inForce)
	if next.draft {
		prod := inForce[next.Name]
		if err := sameRouteText(next, prod); err != nil {
			return err
		}
		if err := checkRoutes(SandboxView(inForce), asViewed(next, prod)); err != nil {
			return err
		}
		// As the API it will be once promoted.
		asProd := *next
		asProd.draft = false
		if prod != nil {
			asProd.Created = prod.Created
		}
		if err := checkRoutes(prodView, &asProd); err != nil {
			return err
		}
		if prod != nil && prod.Route == next.Route {
			return nil // served on its API's route: it adds none
		}
		// A route of its own is one more route of the router production
		// apps are routed by, which answers them 404: it may not be one
		// that takes requests a production route would (a literal
		// segment beside a parameter, a host beside none).
		// It is routed for every method (so that no 405 tells a draft is
		// there), so the methods do not tell them apart either.
		own := next.Route
		own.Method = "*"
		for _, a := range prodView {
			if a.Route.Meets(own) {
				return &RouteConflictError{API: next.StoreKey(), Route: next.Route, HeldBy: a.Name, HeldRoute: a.Route}
			}
		}
		return nil
	}
	if err := checkRoutes(prodView, next); err != nil {
		return err
	}
	if d := inForce[DraftKey(next.Name)]; d != nil {
		if err := sameRouteText(d, next); err != nil {
			return err
		}
	}
	for _, d := range inForce {
		if d.draft && d.Name != next.Name && d.Route.Overlaps(next.Route) {
			return &RouteConflictError{API: next.Name, Route: next.Route, HeldBy: d.StoreKey(), HeldRoute: d.Route}
		}
	}
	return nil
}

// sameRouteText refuses a draft d whose route overlaps its API's (prod,
// nil: none) without being written the same: the edge routes the draft
// by the API's route, with the API's parameter names and method.
func sameRouteText(d, prod *API) error {
	if prod == nil || prod.Route == d.Route || !prod.Route.Overlaps(d.Route) {
		return nil
	}
	return &ValidationError{Key: d.StoreKey(), Problems: []schemas.Problem{{Path: "route",
		Message: fmt.Sprintf("the draft's route overlaps its API's (%s %s%s) and must then be written as it is, method, host and parameter names alike (or move elsewhere)", prod.Route.Method, prod.Route.Host, prod.Route.Path)}}}
}

// PutDraft validates doc (JSON or YAML) as the draft of the API it names
// and stores it under DraftKey(name), as Put stores an API: the route
// check, compare-and-set with IfRevision (the draft's own revision) and the
// audit trail alike. A draft must require authentication: only apps
// marked sandbox call it.
func (c *Client) PutDraft(ctx context.Context, doc []byte, opts ...WriteOption) (*API, error) {
	return c.put(ctx, doc, true, opts)
}

// Promote makes the draft of the API name, which must be at draftRev, its
// production entry, by compare-and-set at prodRev (0: the API must not
// exist), then removes the draft at draftRev: a draft changed since stays.
// The draft is validated again as a production entry, and the route checks
// of Put apply. Conflicts are *ConflictError (Kind "draft" for the draft).
// Callers run the draft's cases first (admin.Promote) and say whether they
// did: the audit trail records "promote", or "promote-untested".
func (c *Client) Promote(ctx context.Context, name string, draftRev, prodRev uint64, tested bool) (*API, error) {
	e, err := c.Get(ctx, DraftKey(name))
	if err != nil {
		return nil, err
	}
	if e.Revision != draftRev {
		return nil, &ConflictError{Kind: "draft", Key: name, Want: draftRev, Current: e.Revision}
	}
	a, err := parseAPIDoc(name, false, e.Value)
	if err != nil {
		return nil, fmt.Errorf("the draft of %s does not validate as its production entry: %w", name, err)
	}
	action := "promote"
	if !tested {
		action = "promote-untested"
	}
	if a, err = c.publish(ctx, a, e.Value, []WriteOption{IfRevision(prodRev)}); err != nil {
		// No answer, then read back in force: the same audit record and
		// the draft's removal, on the connection of the read-back.
		return nil, c.afterLanded(err, func(ctx context.Context, cc *Client, rev uint64) error {
			kv, kerr := cc.js.KeyValue(ctx, BucketAPIs)
			if kerr != nil {
				return errors.Join(cc.noted(ctx, "api", action, name, rev, nil),
					fmt.Errorf("%s is promoted at revision %d, but its draft was not removed: opening bucket %s: %w", name, rev, BucketAPIs, kerr))
			}
			cc.kv = kv
			return cc.promoted(ctx, name, action, rev, draftRev)
		})
	}
	return a, c.promoted(ctx, name, action, a.Revision, draftRev)
}

// promoted is what follows a promotion that landed at rev: its audit
// record (action), then the removal of the draft at draftRev.
func (c *Client) promoted(ctx context.Context, name, action string, rev, draftRev uint64) error {
	auditErr := c.noted(ctx, "api", action, name, rev, nil)
	err := c.kv.Delete(ctx, DraftKey(name), jetstream.LastRevision(draftRev))
	switch {
	case err == nil:
		err = c.noted(ctx, "api", "delete", DraftKey(name), 0, nil)
	case isConflict(err) || errors.Is(err, jetstream.ErrKeyNotFound):
		err = nil // a newer draft, or none: it is not ours to remove
	case noAnswer(err):
		// The API is promoted; only the draft's removal is unknown.
		err = fmt.Errorf("%s is promoted at revision %d, but the removal of its draft got no answer: %w", name, rev,
			c.notedLater(writeFailed(c.kv, "delete", "draft", DraftKey(name), nil, 0, err), "api", "delete", DraftKey(name)))
	default:
		err = fmt.Errorf("%s is promoted at revision %d, but its draft was not removed: %w", name, rev, err)
	}
	return errors.Join(auditErr, err)
}

// RoutedDrafts are the snapshot's drafts that hold their routes in the
// sandbox view (SandboxView), and lost the others by name, each with the
// store key of the API or draft holding its route.
func (s *Snapshot) RoutedDrafts() (routed []*API, lost map[string]string) {
	if len(s.Drafts) == 0 {
		return nil, nil
	}
	inForce := make(map[string]*API, len(s.APIs)+len(s.Drafts))
	for _, a := range s.APIs {
		inForce[a.Name] = a
	}
	for _, d := range s.Drafts {
		inForce[d.StoreKey()] = d
	}
	view := SandboxView(inForce)
	conflicts := Conflicts(slices.Collect(maps.Values(view)))
	lost = map[string]string{}
	for _, d := range s.Drafts {
		if holder, ok := conflicts[d.Name]; ok {
			lost[d.Name] = view[holder].StoreKey()
			continue
		}
		routed = append(routed, d)
	}
	slices.SortFunc(routed, func(a, b *API) int { return strings.Compare(a.Name, b.Name) })
	return routed, lost
}
