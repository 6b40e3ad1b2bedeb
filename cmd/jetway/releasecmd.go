package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jetway-gw/jetway/resilience"
)

const releaseUsage = `Usage: jetway release <command> [flags] API

A gray release sends a percent of an API's calls to its canary channel
(the entry's "release" block), raises the percent each window whose calls
pass the gates, and sets it to 0 when a step breaches one
(docs/channels.md). Commands go to the API's controller, which applies
each once, within a second or two; the command waits for that (--wait)
and says what the release became, or that another operator's command
replaced it first.

Commands:
  start API      begin at the first step
  status API     the release's stage, percent and last changes
  pause API      hold the percent where it is
  resume API     go on from a pause
  promote API    100 %: the canary takes every call it may
  rollback API   0 %: the canary takes no call, the always-apps' neither.
                 Only the canary's share moves: no entry revision is
                 touched, unlike "jetway api rollback"

Flags:
`

func cmdRelease(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	reason := fs.String("reason", "", "why, kept with the command and in the history")
	asJSON := fs.Bool("json", false, "status: the state and history as JSON")
	wait := fs.Duration("wait", 4*time.Second, "how long a command waits for the controller to apply it, within --timeout (0: do not wait)")
	fs.Usage = func() { groupUsage(stderr, fs, "release", releaseUsage, args) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := checkSubcommand(fs, "release", pos, map[string]int{"start": 1, "status": 1, "pause": 1, "resume": 1, "promote": 1, "rollback": 1}); err != nil {
		return err
	}
	ctx, c, done, err := rf.dial(1)
	if err != nil {
		return err
	}
	defer done()
	api := pos[1]
	if pos[0] != "status" {
		id, err := c.SendRelease(ctx, api, pos[0], *reason)
		if err != nil {
			return err
		}
		// The controller applies a command within a step or two; one sent
		// after it (by another operator) replaces it before then, so say
		// which happened rather than only that it was sent.
		for deadline := time.Now().Add(*wait); ; {
			cv, err := c.ChannelView(ctx, api)
			if err == nil {
				if st := cv.State; st != nil && st.Release != nil && st.Release.Command == id {
					fmt.Fprintf(stdout, "release of %s: %s applied, %s at %.4g %%\n", api, pos[0], st.Release.Stage, st.Release.Percent)
					return nil
				}
				if o := cv.Overrides.Release; o != nil && o.ID != id {
					return fmt.Errorf("the %s was replaced by a %s from %s before the controller applied it", pos[0], o.Action, o.By)
				}
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				pool := "?"
				if cv != nil {
					pool = cv.API.Pool
				}
				fmt.Fprintf(stdout, "sent %s to the release of %s (command %s), not applied within %v: is a worker of pool %s running? see jetway release status %s\n",
					pos[0], api, id, *wait, pool, api)
				return nil
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	st, a, err := c.ChannelState(ctx, api)
	if err != nil {
		return err
	}
	if a.Release == nil {
		return fmt.Errorf("api %s has no release block", api)
	}
	hist, err := c.ReleaseHistory(ctx, api)
	if err != nil {
		return err
	}
	var rs *resilience.ReleaseState
	if st != nil {
		rs = st.Release
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			API     string                    `json:"api"`
			Canary  string                    `json:"canary"`
			State   *resilience.ReleaseState  `json:"state"`
			History []resilience.ReleaseEvent `json:"history"`
		}{api, a.Release.Canary, rs, hist})
	}
	if rs == nil {
		fmt.Fprintf(stdout, "release of %s: canary %s, pending (no controller has stepped it yet)\n", api, a.Release.Canary)
	} else {
		fmt.Fprintf(stdout, "release of %s: canary %s, %s at %.4g %% since %s\n", api, rs.Canary, rs.Stage, rs.Percent, rs.Since.UTC().Format(time.RFC3339))
		if rs.Reason != "" {
			fmt.Fprintf(stdout, "  %s\n", rs.Reason)
		}
	}
	if len(hist) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tFROM\tTO\tPERCENT\tBY\tCANARY CALLS\tFAILED\tREASON")
	for _, e := range hist {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.4g\t%s\t%d\t%d\t%s\n", e.At.UTC().Format(time.RFC3339), e.From, e.To, e.Percent, e.By, e.CanaryWindow.Calls, e.CanaryWindow.Failures, e.Reason)
	}
	return tw.Flush()
}
