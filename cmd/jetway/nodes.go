package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetway-gw/jetway/bus"
)

const nodesUsage = `Usage: jetway nodes [--nats URL] [--json] [--wait 1.5s]

Lists the live nodes of the cluster. Every serve, edge and worker process
publishes a heartbeat on jetway.heartbeat.<role>.<id> every second; this
command listens for --wait and prints each node it heard: id, role, pools,
version, calls in flight, uptime, admin address, host and, for an edge
with a standby cluster, the site its calls go to (primary or standby;
blank for any other node: the edge's own word). A node that stops
cleanly says so in its last heartbeat and is not listed; one silent for three
heartbeats is dead. With --json it prints the nodes as a JSON array, the same
document the admin listener serves at /nodes.

Flags:
`

func cmdNodes(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway nodes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := natsFlag(fs)
	asJSON := fs.Bool("json", false, "print the nodes as a JSON array")
	wait := fs.Duration("wait", 1500*time.Millisecond, "how long to listen for heartbeats (nodes beat every second)")
	fs.Usage = func() {
		fmt.Fprint(stderr, nodesUsage)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: jetway nodes takes no arguments, got %q", errUsage, pos)
	}
	if *wait <= 0 {
		return fmt.Errorf("%w: --wait must be positive, got %v", errUsage, *wait)
	}
	if *wait < bus.DefaultHeartbeatPeriod {
		fmt.Fprintf(stderr, "jetway: --wait %v is shorter than the heartbeat period (%v); some nodes may be missed\n", *wait, bus.DefaultHeartbeatPeriod)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second+*wait)
	defer cancel()
	nc, err := natsURL.connect(ctx, "jetway-cli")
	if err != nil {
		return err
	}
	defer nc.Close()
	// Discover listens for 1.2 periods; pick the period that makes that --wait.
	nodes, err := bus.Discover(ctx, nc, *wait*5/6)
	if err != nil {
		return fmt.Errorf("listening for heartbeats: %w", err)
	}

	if *asJSON {
		return bus.WriteNodesJSON(stdout, nodes)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tROLE\tPOOLS\tVERSION\tIN-FLIGHT\tUPTIME\tADMIN\tHOST\tSITE")
	for _, n := range nodes {
		pools := strings.Join(n.Pools, ",")
		if pools == "" && n.Role == string(roleServe) {
			pools = "(all)" // serve's workers take every pool
		}
		// SITE last and blank when absent: most nodes have none.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", n.ID, n.Role, nodesOrDash(pools), nodesOrDash(n.Version),
			n.InFlight, n.UptimeDuration().Round(time.Second), nodesOrDash(n.Admin), nodesOrDash(n.Host), n.Site)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(nodes) == 0 {
		fmt.Fprintf(stderr, "jetway: no heartbeats heard within %v\n", *wait)
	}
	return nil
}

func nodesOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
