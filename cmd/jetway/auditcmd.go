package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetway-gw/jetway/registry"
)

const auditUsage = `Usage: jetway audit [flags]

The audit trail: every registry change written through Jetway (the CLI,
the admin REST API, the console) — when, who, what and the revision it made
— oldest first. Kept a year in the stream jetway_audit, which only the
admin user writes and reads.

Flags:
`

func cmdAudit(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	since := fs.Duration("since", 0, "only the changes of this last while (e.g. 24h); 0: all kept")
	kind := fs.String("kind", "", "only changes of this kind: "+strings.Join(registry.AuditKinds, ", "))
	limit := fs.Int("limit", 100, "at most this many (the newest)")
	asJSON := fs.Bool("json", false, "print the changes as JSON, one a line")
	fs.Usage = func() {
		fmt.Fprint(stderr, auditUsage)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: jetway audit takes no arguments, got %q", errUsage, pos)
	}
	if *since < 0 || *limit <= 0 {
		return fmt.Errorf("%w: --since must not be negative and --limit must be positive", errUsage)
	}
	ctx, c, done, err := rf.dial(1)
	if err != nil {
		return err
	}
	defer done()
	var from time.Time
	if *since > 0 {
		from = time.Now().Add(-*since)
	}
	changes, err := c.Audit(ctx, from, *kind, *limit)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, ch := range changes {
			if err := enc.Encode(ch); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tACTOR\tACTION\tKIND\tKEY\tREVISION")
	for _, ch := range changes {
		rev := "-"
		if ch.Revision != 0 {
			rev = fmt.Sprint(ch.Revision)
		}
		if ch.Settled != "" {
			// No answer came; the write was read back in force.
			rev += " (settled by " + ch.Settled + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", ch.At.Format(time.RFC3339), ch.Actor, ch.Action, ch.Kind, ch.Key, rev)
	}
	return tw.Flush()
}
