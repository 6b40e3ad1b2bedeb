package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetway-gw/jetway/registry"
)

const faultUsage = `Usage: jetway fault <command> [flags] [args]

Commands:
  on NAME     start a drill on the API: every edge delays and/or aborts a
              share of its calls, before they reach a worker, within a
              second; it turns itself off at its expiry
  off NAME    end the drill (deletes the switch)
  list        the drills, with their expiry (expired ones show as off)

The switch lives in the JetStream KV bucket jetway_flags under key
fault.NAME (schemas/fault.schema.json). Drilled calls carry X-Jetway-Fault
(delay, abort or delay,abort), the span attribute jetway.fault and the access log field
fault, and count in jetway_faults_injected_total; an abort counts as a
failed call (code FAULT_INJECTED), so alerts see the drill.

Flags of "on" (give --abort, --delay or both):
  --abort STATUS      answer with this status (200-599); the body is
                      {"code":"FAULT_INJECTED",...} unless --body is given
  --delay D|MIN-MAX   hold calls for D, or for a uniform time between MIN and
                      MAX ("200ms", "100ms-2s"); one held past its deadline
                      gets 504
  --percent P         share of matching calls aborted (or delayed, with
                      --delay only), 0.01-100 (default 100)
  --delay-percent P   share of matching calls delayed when --abort is given
                      too (default --percent)
  --body BODY         the abort's body: JSON if it parses, text otherwise
  --app ID            only this app's calls; repeat for several
  --header K:V        only calls with this request header; repeat: all must match
  --sandbox           the API's sandbox tier (sandbox apps' calls) instead of production
  --for D             how long the drill lasts (default 1h, at most 168h)
  --until TIME        when it ends (RFC 3339), instead of --for
  --reason TEXT       the drill's name: in traces, logs and the default body
  --ahead             start it although the API is not published (yet)

Flags:
`

func cmdFault(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway fault", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	abort := fs.Int("abort", 0, "on: answer with this status")
	delay := fs.String("delay", "", "on: hold calls for D, or MIN-MAX")
	percent := fs.Float64("percent", 100, "on: share of matching calls, 0.01-100")
	delayPercent := fs.Float64("delay-percent", 0, "on: share of matching calls delayed, with --abort too (default --percent)")
	body := fs.String("body", "", "on: the abort's body (JSON or text)")
	sandbox := fs.Bool("sandbox", false, "on: the sandbox tier instead of production")
	lasts := fs.Duration("for", time.Hour, "on: how long the drill lasts")
	until := fs.String("until", "", "on: when the drill ends (RFC 3339), instead of --for")
	reason := fs.String("reason", "", "on: the drill's name")
	ahead := fs.Bool("ahead", false, "on: start it although the API is not published")
	var apps, headers stringList
	fs.Func("app", "on: only this app's calls; repeat for several", func(v string) error { apps = append(apps, v); return nil })
	fs.Func("header", "on: only calls with this request header K:V; repeat for several", func(v string) error { headers = append(headers, v); return nil })
	fs.Usage = func() { groupUsage(stderr, fs, "fault", faultUsage, args) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := checkSubcommand(fs, "fault", pos, map[string]int{"on": 1, "off": 1, "list": 0}); err != nil {
		return err
	}
	var f *registry.Fault
	if pos[0] == "on" {
		if f, err = faultFromFlags(*abort, *delay, *percent, *delayPercent, *body, *until, *lasts, apps, headers); err != nil {
			return err
		}
		f.Sandbox, f.Reason = *sandbox, *reason
		// Validate before dialing: a bad switch fails the same way
		// whether or not NATS is up.
		if _, err := registry.ParseFault(registry.FaultKey(pos[1]), f.Marshal(), time.Now()); err != nil {
			return describeInvalid(err, stderr, "fault switch")
		}
	}
	ctx, c, done, err := rf.dial(1)
	if err != nil {
		return err
	}
	defer done()
	switch pos[0] {
	case "on":
		if !*ahead {
			a, err := checkSwitchTarget(ctx, c, pos[1])
			if err != nil {
				return err
			}
			if f.Sandbox && a.Sandbox == nil {
				return fmt.Errorf("api %s has no sandbox tier, so a --sandbox drill would do nothing; drop --sandbox, or pass --ahead", pos[1])
			}
		}
		got, err := c.SetFault(ctx, pos[1], f)
		if err != nil {
			return describeInvalid(err, stderr, "fault switch")
		}
		fmt.Fprintf(stdout, "drill on %s: %s, until %s (revision %d)\n", pos[1], describeFault(got), got.ExpiresAt.Format(time.RFC3339), got.Revision)
	case "off":
		if err := c.ClearFault(ctx, pos[1]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "drill on %s ended\n", pos[1])
	case "list":
		es, err := c.ListFaults(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "API\tSTATE\tFAULT\tUNTIL\tREASON\tREVISION")
		now := time.Now()
		for _, e := range es {
			if e.Err != nil {
				fmt.Fprintf(tw, "%s\tinvalid\t%v\t-\t-\t%d\n", e.Key, e.Err, e.Revision)
				continue
			}
			state := "on"
			if e.Value.Expired(now) {
				state = "off (expired)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", e.Value.API, state, describeFault(e.Value), e.Value.ExpiresAt.Format(time.RFC3339), e.Value.Reason, e.Revision)
		}
		return tw.Flush()
	}
	return nil
}

// faultFromFlags builds the switch of fault on from its flags.
func faultFromFlags(abort int, delay string, percent, delayPercent float64, body, until string, lasts time.Duration, apps, headers []string) (*registry.Fault, error) {
	if abort == 0 && delay == "" {
		return nil, fmt.Errorf("%w: fault on needs --abort STATUS, --delay D, or both", errUsage)
	}
	f := &registry.Fault{Apps: apps, ExpiresAt: time.Now().Add(lasts).UTC().Truncate(time.Second)}
	if until != "" {
		t, err := time.Parse(time.RFC3339, until)
		if err != nil {
			return nil, fmt.Errorf("%w: --until %q: want RFC 3339, like 2026-12-01T18:00:00Z", errUsage, until)
		}
		f.ExpiresAt = t
	}
	if abort != 0 {
		f.Abort = &registry.FaultAbort{Percent: percent}
		f.Abort.Status = abort
		if body != "" {
			if json.Valid([]byte(body)) {
				f.Abort.JSON = json.RawMessage(body)
			} else {
				f.Abort.Body = &body
			}
		}
	}
	if delay != "" {
		lo, hi, ranged := strings.Cut(delay, "-")
		dmin, err := time.ParseDuration(lo)
		if err != nil {
			return nil, fmt.Errorf("%w: --delay %q: want a duration like 200ms, or a range like 100ms-2s", errUsage, delay)
		}
		d := &registry.FaultDelay{Min: registry.Duration(dmin), Percent: percent}
		if ranged {
			dmax, err := time.ParseDuration(hi)
			if err != nil {
				return nil, fmt.Errorf("%w: --delay %q: want a range like 100ms-2s", errUsage, delay)
			}
			d.Max = registry.Duration(dmax)
		}
		if delayPercent != 0 {
			d.Percent = delayPercent
		}
		f.Delay = d
	}
	for _, h := range headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			return nil, fmt.Errorf("%w: --header %q: want Name:value", errUsage, h)
		}
		if f.Headers == nil {
			f.Headers = map[string]string{}
		}
		f.Headers[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return f, nil
}

// describeFault is a switch in a few words: "abort 503 10%, delay 200ms 50%".
func describeFault(f *registry.Fault) string {
	var parts []string
	if d := f.Delay; d != nil {
		s := time.Duration(d.Min).String()
		if d.Max > d.Min {
			s += "-" + time.Duration(d.Max).String()
		}
		parts = append(parts, "delay "+s+" "+strconv.FormatFloat(d.Percent, 'g', -1, 64)+"%")
	}
	if a := f.Abort; a != nil {
		parts = append(parts, "abort "+strconv.Itoa(a.Status)+" "+strconv.FormatFloat(a.Percent, 'g', -1, 64)+"%")
	}
	if len(f.Apps) > 0 {
		parts = append(parts, "apps "+strings.Join(f.Apps, ","))
	}
	if len(f.Headers) > 0 {
		parts = append(parts, fmt.Sprintf("%d header(s)", len(f.Headers)))
	}
	if f.Sandbox {
		parts = append(parts, "sandbox tier")
	}
	return strings.Join(parts, ", ")
}
