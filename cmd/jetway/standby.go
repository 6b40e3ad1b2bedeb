package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetway-gw/jetway/registry"
)

const standbyUsage = `Usage: jetway standby init --nats STANDBY_URL --primary-domain DOMAIN [--replicas N]
       jetway standby status --nats STANDBY_URL

A standby cluster is a second NATS cluster with its own workers that an
edge's calls move to when the primary is unhealthy (edge --nats-standby;
docs/operations.md, "A standby cluster"). Its servers are leaf nodes of the
primary cluster, each cluster with its own JetStream domain.

init    makes the cluster --nats points at a standby of the primary, the
        JetStream domain --primary-domain: the registry buckets (APIs,
        switches, apps, alert rules, certificates, schemas, topics, pool
        secrets) are created there as mirrors of the primary's, which
        follow it while the link is up and keep the last copy while it is
        not. Buckets already mirroring are kept; one with entries of its
        own is an error. Run it once, after the primary's registry exists.
status  prints each mirror's lag behind the primary and when it last
        heard from it.

Flags:
`

func cmdStandby(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "init" && args[0] != "status") {
		fmt.Fprint(stderr, standbyUsage)
		return fmt.Errorf("%w: jetway standby init|status", errUsage)
	}
	sub := args[0]
	fs := flag.NewFlagSet("jetway standby "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := natsFlag(fs)
	domain := fs.String("primary-domain", "", "init: the primary cluster's JetStream domain")
	replicas := fs.Int("replicas", 1, "init: replicas of each mirror (3 on a three-node standby)")
	fs.Usage = func() {
		fmt.Fprint(stderr, standbyUsage)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: jetway standby %s takes no arguments, got %q", errUsage, sub, pos)
	}
	if sub == "init" && *domain == "" {
		return fmt.Errorf("%w: jetway standby init needs --primary-domain", errUsage)
	}
	if *replicas < 1 || *replicas > 5 {
		return fmt.Errorf("%w: --replicas %d: a stream has 1 to 5", errUsage, *replicas)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := natsURL.connect(ctx, "jetway-cli")
	if err != nil {
		return err
	}
	defer nc.Close()
	if sub == "init" {
		states, err := registry.InitStandby(ctx, nc, *domain, *replicas)
		for _, st := range states {
			what := "kept (already mirroring the primary)"
			if st.Created {
				what = "created, mirroring domain " + *domain
			}
			fmt.Fprintf(stdout, "%s\t%s\n", st.Bucket, what)
		}
		return err
	}
	lags, err := registry.StandbyLag(ctx, nc)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BUCKET\tLAG\tLAST HEARD")
	var bad []string
	for _, l := range lags {
		switch {
		case l.Err != nil:
			fmt.Fprintf(tw, "%s\t-\t%v\n", l.Bucket, l.Err)
			bad = append(bad, l.Bucket)
		case l.Active < 0:
			fmt.Fprintf(tw, "%s\t%d\tnever\n", l.Bucket, l.Lag)
		default:
			fmt.Fprintf(tw, "%s\t%d\t%s ago\n", l.Bucket, l.Lag, time.Duration(l.Active).Round(time.Millisecond))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(bad) > 0 {
		return fmt.Errorf("not mirroring: %s", strings.Join(bad, ", "))
	}
	return nil
}
