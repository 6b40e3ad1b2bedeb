package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

const alertUsage = `Usage: jetway alert <command> [flags] [args]

Commands:
  put FILE|-     validate an alert rule (JSON or YAML) and store it
  list           list the alert rules
  delete NAME    remove a rule

A rule (bucket jetway_alerts, key = its name):
  {"name": "orders-errors", "kind": "success_rate_below", "api": "orders.get",
   "threshold": 0.99, "window": "1m", "min_calls": 20, "webhook": "http://hooks/alerts"}
kinds: success_rate_below (threshold), p99_above (latency, e.g. "300ms"),
breaker_opened, channel_cut (per channel, until it is available again),
release_rolled_back (until the release runs again),
no_workers (pool). "api": "*" watches every API.
Firing and resolving are published on jetway.alerts.<rule>.<api or pool>
(<api>/<channel> for channel_cut; and POSTed to the webhook), once each:
repeats are suppressed.

Flags:
`

func cmdAlert(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway alert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	fs.Usage = func() { groupUsage(stderr, fs, "alert", alertUsage, args) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := checkSubcommand(fs, "alert", pos, map[string]int{"put": 1, "list": 0, "delete": 1}); err != nil {
		return err
	}
	var doc []byte
	if pos[0] == "put" {
		if doc, err = readDoc(pos[1], stdin); err != nil {
			return err
		}
	}
	ctx, c, done, err := rf.dial(1)
	if err != nil {
		return err
	}
	defer done()
	switch pos[0] {
	case "put":
		r, err := c.PutAlert(ctx, doc)
		if err != nil {
			return describeInvalid(err, stderr, "alert rule")
		}
		fmt.Fprintf(stdout, "stored alert %s (%s) at revision %d\n", r.Name, r.Kind, r.Revision)
	case "delete":
		if err := c.DeleteAlert(ctx, pos[1]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted alert %s\n", pos[1])
	case "list":
		es, err := c.ListAlerts(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tKIND\tTARGET\tLIMIT\tWINDOW\tWEBHOOK")
		for _, e := range es {
			if e.Err != nil {
				fmt.Fprintf(tw, "%s\tinvalid\t-\t%v\t-\t-\n", e.Key, e.Err)
				continue
			}
			r := e.Value
			target, limit := r.API, "-"
			switch {
			case r.Pool != "":
				target = "pool " + r.Pool
			case r.Threshold > 0:
				limit = fmt.Sprint(r.Threshold)
			case r.Latency > 0:
				limit = time.Duration(r.Latency).String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\n", r.Name, r.Kind, target, limit, r.WindowOrDefault(), r.Webhook)
		}
		return tw.Flush()
	}
	return nil
}
