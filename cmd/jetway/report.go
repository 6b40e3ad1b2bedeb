package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jetway-gw/jetway/report"
)

const reportUsage = `Usage: jetway report [flags]

The SLA report of a period, per API and per owner, from the edges'
per-minute records (stream jetway_sla, kept 35 days, every node's):
availability per 5-minute window (a year has 105,120) and over the period,
TP50/90/99/999, calls, errors by code, the slowest APIs by p99, breakers
opened, degrade and fault switches flipped, registry changes of the APIs.

Availability is successes ÷ (successes + the gateway's failures): the
backend's own failures (its error statuses, CLASSIFIED, BAD_GATEWAY,
CIRCUIT_OPEN) and calls refused on purpose (RATE_LIMITED, UNAUTHENTICATED,
FORBIDDEN, BAD_REQUEST, INVALID_REQUEST, PAYLOAD_TOO_LARGE, DEGRADED, ...)
are left out; every other failure (GATEWAY_TIMEOUT, NO_WORKERS, BUS_LOST,
BUS_UNAVAILABLE, INTERNAL, OVERLOADED, FAULT_INJECTED, ...) counts against
it. The period's figure is the same ratio over all its calls.

--since and --until take a duration back from now (24h, 7d), a date
(2006-01-02) or a time (RFC 3339).

Delivery to each owner, daily or weekly, by webhook or mail:
  jetway report schedule put FILE|- | list | delete OWNER
  jetway report send OWNER [--since 24h]    (jetway report schedule -h)

Flags:
`

func cmdReport(args []string, stdout, stderr io.Writer) error {
	return cmdReportIn(args, os.Stdin, stdout, stderr)
}

// cmdReportIn is jetway report, and its subcommands schedule and send
// (reportsched.go).
func cmdReportIn(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "schedule":
			return cmdReportSchedule(args[1:], stdin, stdout, stderr)
		case "send":
			return cmdReportSend(args[1:], stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("jetway report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	if t := fs.Lookup("timeout"); t != nil {
		_ = t.Value.Set("30s")
		t.DefValue = "30s"
	}
	since := fs.String("since", "24h", "start of the period: a duration back from now (24h, 7d), a date or an RFC 3339 time")
	until := fs.String("until", "", "end of the period (same forms); default now")
	format := fs.String("format", "md", "md, html (one self-contained page) or json")
	api := fs.String("api", "", "only this API (and its sandbox tier)")
	owner := fs.String("owner", "", `only the APIs of this owner ("unowned": those without one)`)
	target := fs.Float64("target", 99.99, "availability target in percent: windows below it are listed")
	top := fs.Int("top", 10, "how many of the slowest APIs to list")
	fs.Usage = func() {
		fmt.Fprint(stderr, reportUsage)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%w: jetway report takes no arguments, got %q", errUsage, pos)
	}
	q := report.Query{Since: *since, Until: *until, Format: *format, API: *api, Owner: *owner, Target: *target, Top: *top}
	o, err := q.Options(time.Now().UTC())
	if err != nil {
		return fmt.Errorf("%w: --%v", errUsage, err)
	}
	ctx, c, js, done, err := rf.dialJS(1)
	if err != nil {
		return err
	}
	defer done()
	in, err := report.Read(ctx, js, c, o)
	if err != nil {
		return err
	}
	return report.Write(stdout, report.Build(in, o), o.Format)
}

// slaReport is the report as its JSON reads (package report).
type slaReport = report.Report

// parseWhen reads a point in time (report.ParseWhen).
func parseWhen(s string, now time.Time) (time.Time, error) { return report.ParseWhen(s, now) }
