package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jetway-gw/jetway/admin"
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

With --admin-url each goes through the admin REST API (/v1/deadletters:
list for a viewer, show and replay for an operator, purge for an admin).

Flags:
`

func cmdDLQ(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway dlq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	adm := addAdminFlags(fs)
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
	if rest, err := adm.use(fs, true); err != nil {
		return err
	} else if rest {
		c, err := adm.client(*rf.timeout)
		if err != nil {
			return err
		}
		return dlqOverREST(c, pos[0], api, seq, *limit, *asJSON, stdout)
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
		return printDeadLetters(stdout, dls, *asJSON)
	case "show":
		d, body, err := c.DeadLetter(ctx, seq)
		if err != nil {
			return err
		}
		return printDeadLetter(stdout, d, body)
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

// dlqOverREST is `jetway dlq` with --admin-url: the same output, each
// command one request to /v1/deadletters.
func dlqOverREST(c *restClient, cmd, api string, seq uint64, limit int, asJSON bool, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.hc.Timeout)
	defer cancel()
	key := strconv.FormatUint(seq, 10)
	path := "/v1/deadletters/" + key
	q := url.Values{}
	if api != "" {
		q.Set("api", api)
	}
	switch cmd {
	case "list":
		q.Set("limit", strconv.Itoa(limit))
		var res struct {
			Items []registry.DeadLetter `json:"items"`
		}
		if err := c.getJSON(ctx, "dead letters", "/v1/deadletters?"+q.Encode(), &res); err != nil {
			return err
		}
		return printDeadLetters(stdout, res.Items, asJSON)
	}
	method, at := http.MethodGet, path
	switch cmd {
	case "replay":
		method, at = http.MethodPost, path+"/replay"
	case "purge":
		method, at = http.MethodDelete, "/v1/deadletters"
		if len(q) > 0 {
			at += "?" + q.Encode()
		}
	}
	a, err := c.call(ctx, method, at, nil)
	if err != nil {
		return err
	}
	if a.status != http.StatusOK {
		return restError("dead letter", key, 0, a)
	}
	switch cmd {
	case "show":
		var v admin.DeadLetterView
		if err := decode(a, &v); err != nil {
			return err
		}
		body := v.BodyBase64
		if v.Body != nil {
			body = []byte(*v.Body)
		}
		return printDeadLetter(stdout, &v.DeadLetter, body)
	case "purge":
		var res struct {
			Removed uint64 `json:"removed"`
		}
		if err := decode(a, &res); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d dead letters removed\n", res.Removed)
		return nil
	}
	var r admin.Replayed
	if err := decode(a, &r); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "job %s of %s sent again: /_jetway/jobs/%s\n", r.Job, r.DeadLetter.API, r.Job)
	return nil
}

// printDeadLetters prints dead letters as a table, or as JSON, one a line.
func printDeadLetters(stdout io.Writer, dls []registry.DeadLetter, asJSON bool) error {
	if asJSON {
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
}

// printDeadLetter prints one dead letter with its request's body.
func printDeadLetter(stdout io.Writer, d *registry.DeadLetter, body []byte) error {
	return json.NewEncoder(stdout).Encode(struct {
		*registry.DeadLetter
		Body string `json:"body"`
	}{d, string(body)})
}

// dash is s, or "-" for nothing.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
