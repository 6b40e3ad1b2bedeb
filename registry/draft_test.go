package registry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

func draftEntry(name, path, auth string) []byte {
	a := `{"name":"` + name + `","pool":"p","route":{"path":"` + path + `"},"backend":{"type":"http","url":"http://127.0.0.1:1"}`
	if auth != "" {
		a += `,"auth":{"methods":["` + auth + `"]}`
	}
	return []byte(a + "}")
}

func TestDraftEntries(t *testing.T) {
	c := clients(t, natstest.RunServer(t), 1)[0]
	ctx := context.Background()

	t.Run("no API name begins with draft.", func(t *testing.T) {
		_, err := c.Put(ctx, draftEntry("draft.orders", "/x", ""))
		var ve *registry.ValidationError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), "drafts are kept under that prefix") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("a draft needs authentication", func(t *testing.T) {
		_, err := c.PutDraft(ctx, draftEntry("orders", "/orders", ""))
		if err == nil || !strings.Contains(err.Error(), "a draft needs key") {
			t.Fatalf("got %v", err)
		}
	})

	prod, err := c.Put(ctx, draftEntry("orders", "/orders", "key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, draftEntry("users", "/users", "key")); err != nil {
		t.Fatal(err)
	}
	d, err := c.PutDraft(ctx, draftEntry("orders", "/orders", "key"))
	if err != nil {
		t.Fatalf("a draft on its API's own route: %v", err)
	}
	if !d.IsDraft() || d.StoreKey() != "draft.orders" || d.Key() != "orders@draft" {
		t.Fatalf("draft %+v", d)
	}
	if e, err := c.Get(ctx, "orders"); err != nil || e.Revision != prod.Revision {
		t.Fatalf("the production entry changed: %v %v", e, err)
	}

	t.Run("route claims hold in the sandbox view", func(t *testing.T) {
		var rc *registry.RouteConflictError
		if _, err := c.PutDraft(ctx, draftEntry("orders", "/users", "key")); !errors.As(err, &rc) || rc.HeldBy != "users" {
			t.Fatalf("a draft on another API's route: %v", err)
		}
		if _, err := c.PutDraft(ctx, draftEntry("refunds", "/refunds", "key")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Put(ctx, draftEntry("payouts", "/refunds", "key")); !errors.As(err, &rc) || rc.HeldBy != "draft.refunds" {
			t.Fatalf("an API on a draft's route: %v", err)
		}
		if _, err := c.PutDraft(ctx, draftEntry("payouts", "/refunds", "key")); !errors.As(err, &rc) || rc.HeldBy != "draft.refunds" {
			t.Fatalf("a draft on another draft's route: %v", err)
		}
	})

	t.Run("promote is a compare-and-set on both entries", func(t *testing.T) {
		var ce *registry.ConflictError
		if _, err := c.Promote(ctx, "orders", d.Revision+100, prod.Revision, true); !errors.As(err, &ce) || ce.Kind != "draft" || ce.Current != d.Revision {
			t.Fatalf("a stale draft revision: %v", err)
		}
		if _, err := c.Promote(ctx, "orders", d.Revision, prod.Revision-1, true); !errors.As(err, &ce) || ce.Current != prod.Revision {
			t.Fatalf("a stale production revision: %v", err)
		}
		a, err := c.Promote(ctx, "orders", d.Revision, prod.Revision, true)
		if err != nil {
			t.Fatal(err)
		}
		if a.IsDraft() || a.Created != prod.Created {
			t.Fatalf("promoted %+v: it must keep the API's claim (created %d)", a, prod.Created)
		}
		if _, err := c.Get(ctx, registry.DraftKey("orders")); !errors.Is(err, registry.ErrNotFound) {
			t.Fatalf("the draft is still there: %v", err)
		}
		changes, err := c.Audit(ctx, time.Time{}, "api", 100)
		if err != nil {
			t.Fatal(err)
		}
		var actions []string
		for _, ch := range changes {
			actions = append(actions, ch.Action+" "+ch.Key)
		}
		if got := strings.Join(actions, ","); !strings.Contains(got, "promote orders,delete draft.orders") {
			t.Fatalf("audit trail: %s", got)
		}
	})

	t.Run("a new API is promoted by create", func(t *testing.T) {
		e, err := c.Get(ctx, registry.DraftKey("refunds"))
		if err != nil {
			t.Fatal(err)
		}
		a, err := c.Promote(ctx, "refunds", e.Revision, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		if a.Name != "refunds" || a.Route.Path != "/refunds" {
			t.Fatalf("promoted %+v", a)
		}
	})
}

// Route checks that keep every accepted draft servable and promotable
// (found by review): a draft may not take a route production holds, even
// one whose holder's draft moved away; a production write may not take
// another API's draft's route, even when the writer has a draft; a draft
// on its API's route names it exactly; a draft's own route takes no
// production request, whatever the method.
func TestDraftRoutesStayServable(t *testing.T) {
	ctx := context.Background()
	var rc *registry.RouteConflictError
	t.Run("production's route, its holder's draft elsewhere", func(t *testing.T) {
		c := clients(t, natstest.RunServer(t), 1)[0]
		must := musts(t)
		must(c.Put(ctx, draftEntry("y", "/r", "key")))
		must(c.PutDraft(ctx, draftEntry("y", "/r2", "key")))
		if _, err := c.PutDraft(ctx, draftEntry("x", "/r", "key")); !errors.As(err, &rc) || rc.HeldBy != "y" {
			t.Fatalf("draft x on y's production route: %v", err)
		}
	})
	t.Run("a draft's route, taken by an API with a draft of its own", func(t *testing.T) {
		c := clients(t, natstest.RunServer(t), 1)[0]
		must := musts(t)
		x := must(c.PutDraft(ctx, draftEntry("x", "/r", "key")))
		must(c.Put(ctx, draftEntry("y", "/y", "key")))
		must(c.PutDraft(ctx, draftEntry("y", "/y", "key")))
		if _, err := c.Put(ctx, draftEntry("y", "/r", "key")); !errors.As(err, &rc) || rc.HeldBy != "draft.x" {
			t.Fatalf("production y onto draft.x's route: %v", err)
		}
		if _, err := c.Promote(ctx, "x", x.Revision, 0, true); err != nil {
			t.Fatalf("promote x: %v", err)
		}
	})
	t.Run("its API's route, written otherwise", func(t *testing.T) {
		c := clients(t, natstest.RunServer(t), 1)[0]
		must := musts(t)
		must(c.Put(ctx, draftEntry("o", "/o/{id}", "key")))
		var ve *registry.ValidationError
		if _, err := c.PutDraft(ctx, draftEntry("o", "/o/{orderId}", "key")); !errors.As(err, &ve) || !strings.Contains(err.Error(), "parameter names alike") {
			t.Fatalf("a renamed parameter: %v", err)
		}
	})
	t.Run("a route of its own that would take production's requests", func(t *testing.T) {
		c := clients(t, natstest.RunServer(t), 1)[0]
		must := musts(t)
		must(c.Put(ctx, draftEntry("o", "/o/{id}", "key")))
		must(c.Put(ctx, []byte(`{"name":"open","pool":"p","route":{"method":"GET","path":"/open"},"backend":{"type":"http","url":"http://127.0.0.1:1"}}`)))
		for _, doc := range []string{
			`{"name":"special","pool":"p","route":{"path":"/o/special"},"auth":{"methods":["key"]},"backend":{"type":"http","url":"http://127.0.0.1:1"}}`,
			`{"name":"hosted","pool":"p","route":{"host":"api.example.com","path":"/open"},"auth":{"methods":["key"]},"backend":{"type":"http","url":"http://127.0.0.1:1"}}`,
			`{"name":"posted","pool":"p","route":{"method":"POST","path":"/open"},"auth":{"methods":["key"]},"backend":{"type":"http","url":"http://127.0.0.1:1"}}`,
		} {
			if _, err := c.PutDraft(ctx, []byte(doc)); !errors.As(err, &rc) {
				t.Errorf("%s: %v", doc, err)
			}
		}
		must(c.PutDraft(ctx, draftEntry("elsewhere", "/o/{id}/items", "key")))
	})
}

// musts is the t of a test's must: the entry written, or t fails.
func musts(t *testing.T) func(*registry.API, error) *registry.API {
	return func(a *registry.API, err error) *registry.API {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
}

func TestRoutesMeet(t *testing.T) {
	r := func(m, h, p string) registry.Route { return registry.Route{Method: m, Host: h, Path: p} }
	for _, c := range []struct {
		a, b registry.Route
		meet bool
	}{
		{r("GET", "", "/o/{id}"), r("GET", "", "/o/special"), true},
		{r("GET", "", "/o/{id}"), r("POST", "", "/o/special"), false},
		{r("*", "", "/o/{id}"), r("POST", "", "/o/x"), true},
		{r("GET", "", "/o/{id}"), r("GET", "", "/o/{id}/x"), false},
		{r("GET", "", "/o/*"), r("GET", "", "/o/a/b"), true},
		{r("GET", "", "/o/*"), r("GET", "", "/o"), false},
		{r("GET", "", "/o/"), r("GET", "", "/o/{id}"), false},
		{r("GET", "a.example.com", "/x"), r("GET", "", "/x"), true},
		{r("GET", "a.example.com", "/x"), r("GET", "b.example.com", "/x"), false},
		{r("GET", "*.example.com", "/x"), r("GET", "a.example.com", "/x"), true},
	} {
		if got := c.a.Meets(c.b); got != c.meet || c.b.Meets(c.a) != c.meet {
			t.Errorf("%v meets %v: %v, want %v", c.a, c.b, got, c.meet)
		}
	}
}
