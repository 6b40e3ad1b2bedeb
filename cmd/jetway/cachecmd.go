package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/edge"
	"github.com/jetway-gw/jetway/registry"
)

const cacheUsage = `Usage: jetway cache purge NAME [PATH] [flags]

Drops the answers every edge keeps in the API's response cache (both
tiers): all of them, or those of one path (as the caller sends it, e.g.
/v1/orders/42, every query and header variant). Each edge answers with how
many it dropped; the command waits --wait for the answers and prints them.
The next call of each dropped key reaches the backend again.

Flags:
`

func cmdCache(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway cache", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	wait := fs.Duration("wait", time.Second, "how long to wait for the edges' answers")
	fs.Usage = func() { groupUsage(stderr, fs, "cache", cacheUsage, args) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := checkSubcommand(fs, "cache", pos, map[string]int{"purge": -1}); err != nil {
		return err
	}
	if len(pos) < 2 || len(pos) > 3 {
		return fmt.Errorf("%w: jetway cache purge takes NAME and an optional PATH", errUsage)
	}
	p := bus.CachePurge{API: pos[1]}
	if len(pos) == 3 {
		p.Path = pos[2]
		if !strings.HasPrefix(p.Path, "/") {
			return fmt.Errorf("%w: PATH %q must start with /", errUsage, p.Path)
		}
	}
	if err := bus.ValidName(p.API); err != nil {
		return fmt.Errorf("%w: api name %q: %v", errUsage, p.API, err)
	}
	ctx, c, nc, done, err := rf.dialConn(1)
	if err != nil {
		return err
	}
	defer done()
	// The shared cache before the edges (no edge fills its memory again
	// from it after it purged its own) and after them (an answer an edge
	// stored just before it heard the purge). A bucket that cannot be
	// purged does not stop the edges' purge; the command fails after.
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	purgeShared := func() error {
		if err := edge.PurgeShared(ctx, js, p.API, p.Path); err != nil {
			return fmt.Errorf("the shared cache (bucket %s) was not purged: %w", registry.BucketCache, err)
		}
		return nil
	}
	sharedErr := purgeShared()
	if sharedErr != nil {
		fmt.Fprintln(stderr, sharedErr)
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	b, _ := json.Marshal(p)
	if err := nc.PublishRequest(bus.CachePurgeSubject, inbox, b); err != nil {
		return err
	}
	deadline := time.Now().Add(*wait)
	edges, purged := 0, 0
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) || ctx.Err() != nil {
			break // no (more) edges
		}
		if err != nil {
			return err
		}
		var r bus.CachePurged
		if json.Unmarshal(m.Data, &r) == nil {
			edges++
			purged += r.Purged
		}
	}
	what := "every answer"
	if p.Path != "" {
		what = "the answers of " + p.Path
	}
	fmt.Fprintf(stdout, "purged %s of %s: %d dropped on %d edges\n", what, p.API, purged, edges)
	if err := c.Record(ctx, "cache", "purge", p.API+p.Path); err != nil {
		return err
	}
	if sharedErr == nil {
		sharedErr = purgeShared()
	}
	if edges == 0 {
		return errors.New("no edge answered within --wait")
	}
	return sharedErr
}
