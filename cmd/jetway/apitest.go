package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/jetway-gw/jetway/admin"
	"github.com/jetway-gw/jetway/registry"
)

// apiTest is `jetway api test NAME`: the API's cases against an edge.
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
	results := admin.RunCases(ctx, &http.Client{Timeout: timeout}, edge, key, f.API.Cases)
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
	fmt.Fprintf(stdout, "%d of %d cases passed (api %s at revision %d, on %s)\n", len(results)-failed, len(results), name, f.Entry.Revision, edge)
	if failed > 0 {
		return fmt.Errorf("%d case(s) of api %s failed", failed, name)
	}
	return nil
}
