package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// maxImportedDescription bounds how much of a service's own description a
// draft's description quotes.
const maxImportedDescription = 1024

// importOptions are the flags of `jetway api import-micro`.
type importOptions struct {
	pool   string // production pool of the drafts; default the service's name
	prefix string // route prefix; default /svc/<service>
	dryRun bool
}

// importMicro reads a NATS service's $SRV.INFO and writes one draft
// (registry/draft.go) per endpoint Jetway may call (a subject under
// bus.ServicePrefix): the API calling the endpoint, keyed, served to
// sandbox apps only until `jetway api promote` releases it. Existing
// drafts are never overwritten, and a route another API holds is skipped.
// Of several instances of the service, the first to answer is read.
func importMicro(ctx context.Context, nc *nats.Conn, c *registry.Client, service string, o importOptions, stdout, stderr io.Writer) error {
	msg, err := nc.RequestWithContext(ctx, bus.ServicesPrefix+"INFO."+service, nil)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("no NATS service %q answers $SRV.INFO (nats micro ls lists those that do)", service)
	}
	if err != nil {
		return fmt.Errorf("asking %s for its endpoints: %w", service, err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil || info.Type != micro.InfoResponseType {
		return fmt.Errorf("%s answered $SRV.INFO with something that is not a micro info response", service)
	}
	// The answer must be the service asked for: a responder on the
	// subject answering as another service does not name its APIs.
	if info.Name != service {
		return fmt.Errorf("$SRV.INFO.%s was answered by a service named %q, not %q: nothing imported", service, info.Name, service)
	}
	if err := bus.ValidName(service); err != nil {
		return fmt.Errorf("service name %q cannot name APIs: %v", service, err)
	}
	pool := o.pool
	if pool == "" {
		pool = service
	}
	prefix := strings.TrimRight(o.prefix, "/")
	if prefix == "" {
		prefix = "/svc/" + service
	}
	if len(info.Description) > maxImportedDescription {
		info.Description = info.Description[:maxImportedDescription] + "..."
	}
	var drafts []draft
	for _, ep := range info.Endpoints {
		doc, err := draftEntry(info, ep, pool, prefix)
		if err != nil {
			fmt.Fprintf(stderr, "skipped endpoint %s: %v\n", ep.Name, err)
			continue
		}
		drafts = append(drafts, draft{label: "endpoint " + ep.Name, target: ep.Subject, doc: doc})
	}
	return putDrafts(ctx, c, drafts, o.dryRun, info.Name+" "+info.Version, stdout, stderr)
}

// putDrafts writes draft entries (or prints them, dryRun), never over an
// API that exists nor taking a route another holds: those are skipped.
func putDrafts(ctx context.Context, c *registry.Client, drafts []draft, dryRun bool, from string, stdout, stderr io.Writer) error {
	written := 0
	for _, d := range drafts {
		if dryRun {
			fmt.Fprintf(stdout, "%s\n", d.doc)
			continue
		}
		a, err := c.PutDraft(ctx, d.doc, registry.IfRevision(0))
		var rc *registry.RouteConflictError
		switch {
		case errors.As(err, &rc):
			fmt.Fprintf(stderr, "skipped %s: %v\n", d.label, err)
			continue
		case errors.Is(err, registry.ErrConflict):
			var e struct{ Name string }
			_ = json.Unmarshal(d.doc, &e)
			fmt.Fprintf(stderr, "skipped %s: the draft of api %s exists; not overwritten\n", d.label, e.Name)
			continue
		case err != nil:
			return fmt.Errorf("%s: %w", d.label, err)
		}
		written++
		fmt.Fprintf(stdout, "wrote %s (%s %s -> %s, sandbox apps only) at revision %d\n", a.StoreKey(), a.Route.Method, a.Route.Path, d.target, a.Revision)
	}
	if !dryRun {
		fmt.Fprintf(stdout, "%d draft(s) from %s; sandbox apps call them now; jetway api promote NAME releases each\n", written, from)
	}
	return nil
}

// draftEntry is the draft API entry of one endpoint, validated.
func draftEntry(info micro.Info, ep micro.EndpointInfo, pool, prefix string) ([]byte, error) {
	if err := bus.ValidName(ep.Name); err != nil || strings.Contains(ep.Name, ".") {
		return nil, fmt.Errorf("endpoint name %q cannot name an API", ep.Name)
	}
	name := info.Name + "." + ep.Name
	entry := map[string]any{
		"name": name,
		"pool": pool,
		"description": fmt.Sprintf("NATS service %s %s, endpoint %s (jetway api import-micro). %s",
			info.Name, info.Version, ep.Name, info.Description),
		"route":   map[string]string{"method": "POST", "path": prefix + "/" + ep.Name},
		"auth":    map[string]any{"methods": []string{"key"}},
		"backend": map[string]string{"type": registry.BackendNATS, "subject": ep.Subject},
	}
	doc, err := json.Marshal(entry)
	if err != nil {
		return nil, err
	}
	if _, err := registry.ParseAPI(registry.DraftKey(name), doc); err != nil {
		return nil, err
	}
	return doc, nil
}
