package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jetway-gw/jetway/registry"
)

const dlqUsage = `Usage: jetway dlq <command> [flags]

The dead letters: async jobs that ended without success — every attempt
failed, the backend's answer was not one to retry, the job expired, was
cancelled, or its API is gone — each with the request as it was
submitted, why it ended, its attempts and its last error. Kept 30 days in
the stream jetway_dlq (docs/async.md).

Commands:
  list [API]       the newest dead letters, of one API or all, oldest first
  show SEQ         one dead letter, with its request's body
  replay SEQ       send the job again: its status is pending once more, at
                   the same address, with no attempts spent; the record
                   leaves the dead letters
  purge [API]      remove the dead letters of one API, or all

Flags:
`

func cmdDLQ(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway dlq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	limit := fs.Int("limit", 100, "list: at most this many (the newest)")
	asJSON := fs.Bool("json", false, "list and show: JSON, one record a line")
	fs.Usage = func() { groupUsage(stderr, fs, "dlq", dlqUsage, args) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := checkSubcommand(fs, "dlq", pos, map[string]int{"list": -1, "show": 1, "replay": 1, "purge": -1}); err != nil {
		return err
	}
	api := ""
	switch pos[0] {
	case "list", "purge":
		if len(pos) > 2 {
			return fmt.Errorf("%w: jetway dlq %s takes at most one API, got %q", errUsage, pos[0], pos[1:])
		}
		if len(pos) == 2 {
			api = pos[1]
		}
	}
	var seq uint64
	if pos[0] == "show" || pos[0] == "replay" {
		if seq, err = strconv.ParseUint(pos[1], 10, 64); err != nil || seq == 0 {
			return fmt.Errorf("%w: %q is no dead letter's sequence (a positive number, as dlq list prints)", errUsage, pos[1])
		}
	}
	if *limit <= 0 {
		return fmt.Errorf("%w: --limit must be positive", errUsage)
	}
	ctx, c, done, err := rf.dial(1)
	if err != nil {
		return err
	}
	defer done()
	switch pos[0] {
	case "list":
		dls, err := c.DeadLetters(ctx, api, *limit)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			for _, d := range dls {
				if err := enc.Encode(d); err != nil {
					return err
				}
			}
			return nil
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SEQ\tAT\tAPI\tJOB\tAPP\tREASON\tATTEMPTS\tLAST ERROR")
		for _, d := range dls {
			api := d.API
			if d.Tier != "api" {
				api += "@" + d.Tier
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", d.Seq, d.At.Format(time.RFC3339), api, d.Job, dash(d.App), d.Reason, d.Attempts, dash(d.Error))
		}
		return tw.Flush()
	case "show":
		d, body, err := c.DeadLetter(ctx, seq)
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(struct {
			*registry.DeadLetter
			Body string `json:"body"`
		}{d, string(body)})
	case "replay":
		d, err := c.ReplayDeadLetter(ctx, seq)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "job %s of %s sent again: /_jetway/jobs/%s\n", d.Job, d.API, d.Job)
		return nil
	default: // purge
		n, err := c.PurgeDeadLetters(ctx, api)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d dead letters removed\n", n)
		return nil
	}
}

// dash is s, or "-" for nothing.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
