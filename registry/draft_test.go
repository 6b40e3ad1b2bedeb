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
