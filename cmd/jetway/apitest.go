package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/jetway-gw/jetway/admin"
	"github.com/jetway-gw/jetway/registry"
)

// apiTest is `jetway api test NAME`: the API's cases against an edge. For
// a draft (name draft.NAME) every answer must come from that revision.
func apiTest(ctx context.Context, c *registry.Client, name, edge, key string, timeout time.Duration, stdout io.Writer) error {
	f, err := c.GetInForce(ctx, name)
	if err != nil {
		return err
	}
	if f.API == nil {
		return fmt.Errorf("api %s has no valid revision in force", name)
	}
	if len(f.API.Cases) == 0 {
		return fmt.Errorf("api %s has no saved cases (the entry's cases)", name)
	}
	client := &http.Client{Timeout: timeout}
	var results []admin.CaseResult
	if strings.HasPrefix(name, registry.DraftPrefix) {
		results = admin.RunDraftCases(ctx, client, edge, key, f.API.Cases, f.Entry.Revision)
	} else {
		results = admin.RunCases(ctx, client, edge, key, f.API.Cases)
	}
	failed := printCases(stdout, results)
	fmt.Fprintf(stdout, "%d of %d cases passed (api %s at revision %d, on %s)\n", len(results)-failed, len(results), name, f.Entry.Revision, edge)
	if failed > 0 {
		return fmt.Errorf("%d case(s) of api %s failed", failed, name)
	}
	return nil
}

// printCases prints each case's result and returns how many failed.
func printCases(stdout io.Writer, results []admin.CaseResult) int {
	failed := 0
	for _, r := range results {
		if len(r.Problems) == 0 {
			fmt.Fprintf(stdout, "PASS  %s\n", r.Name)
			continue
		}
		failed++
		fmt.Fprintf(stdout, "FAIL  %s\n", r.Name)
		for _, p := range r.Problems {
			fmt.Fprintf(stdout, "      %s\n", p)
		}
	}
	return failed
}

// promoteFlags are `jetway api promote`'s settings.
type promoteFlags struct {
	edge, key string
	timeout   time.Duration
	draftRev  uint64
	prodRev   *uint64 // --if-revision; nil: the revision read before the cases
	skipCases bool
}

// apiPromote is `jetway api promote NAME` (admin.Promote, as REST does it).
func apiPromote(ctx context.Context, c *registry.Client, name string, o promoteFlags, stdout io.Writer) error {
	p, err := admin.Promote(ctx, c, name, admin.PromoteOptions{Edge: o.edge, Key: o.key, HTTP: &http.Client{Timeout: o.timeout},
		DraftRevision: o.draftRev, ProductionRevision: o.prodRev, SkipCases: o.skipCases})
	printCases(stdout, p.Cases)
	if p.Revision == 0 {
		return err
	}
	printPromotion(stdout, p, o.edge)
	return err
}

// printPromotion says what a promote did; edge is where its cases ran.
func printPromotion(stdout io.Writer, p admin.Promotion, edge string) {
	from := "a new api"
	if p.Previous != 0 {
		from = fmt.Sprintf("replacing revision %d", p.Previous)
	}
	tested := fmt.Sprintf("%d case(s) passed on %s", len(p.Cases), edge)
	if p.Untested {
		tested = "untested (--skip-cases)"
	}
	fmt.Fprintf(stdout, "promoted the draft of %s at revision %d: now revision %d, %s; %s\n", p.API, p.DraftRevision, p.Revision, from, tested)
}
