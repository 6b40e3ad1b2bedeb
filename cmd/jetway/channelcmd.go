package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/resilience"
)

const channelUsage = `Usage: jetway channel <command> [flags] API [CHANNEL]

An API with "channels" in its entry is served by a set of backends; the
controller of its worker pool cuts a failing channel, probes it after
base·2ⁿ and brings it back by doubling its share (docs/channels.md).

Commands:
  list API               one line per channel: name, state, share, weight
  show API               the channels' states, overrides and figures (JSON)
  cut API CHANNEL        hold the channel cut, whatever the controller sees,
                         until "restore" (the last channel too: you decide)
  restore API CHANNEL    clear an override: a channel held cut is probed at
                         once; with --hold, hold it available instead
  history API            every change of the channels' states the bucket
                         keeps (the last 64 revisions)

Flags:
`

func cmdChannel(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway channel", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	reason := fs.String("reason", "", "cut, restore --hold: why, kept with the override")
	hold := fs.Bool("hold", false, "restore: hold the channel available (the controller may not cut it) until restored again without --hold")
	fs.Usage = func() { groupUsage(stderr, fs, "channel", channelUsage, args) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := checkSubcommand(fs, "channel", pos, map[string]int{"list": 1, "show": 1, "cut": 2, "restore": 2, "history": 1}); err != nil {
		return err
	}
	ctx, c, done, err := rf.dial(1)
	if err != nil {
		return err
	}
	defer done()
	api := pos[1]
	switch pos[0] {
	case "list":
		cv, err := c.ChannelView(ctx, api)
		if err != nil {
			return err
		}
		st, a, ov := cv.State, cv.API, cv.Overrides
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CHANNEL\tSTATE\tSHARE\tWEIGHT\tBACKUP\tOVERRIDE\tSINCE\tREASON")
		for _, ch := range a.Channels {
			s := st.Channel(ch.Name)
			if s == nil {
				s = &resilience.ChannelStatus{Name: ch.Name, State: resilience.ChannelAvailable, Share: 1, Reason: "no controller has judged it yet"}
			}
			since := "-"
			if !s.Since.IsZero() {
				since = s.Since.UTC().Format(time.RFC3339)
			}
			override := "-"
			if o, ok := ov.Channels[ch.Name]; ok {
				override = string(o.State) + " by " + o.By
			}
			fmt.Fprintf(tw, "%s\t%s\t%.3g\t%d\t%v\t%s\t%s\t%s\n", ch.Name, s.State, s.Share, ch.WeightOrDefault(), ch.Backup, override, since, s.Reason)
		}
		return tw.Flush()
	case "show":
		cv, err := c.ChannelView(ctx, api)
		if err != nil {
			return err
		}
		st, a, ov := cv.State, cv.API, cv.Overrides
		out := struct {
			API       string                              `json:"api"`
			Pool      string                              `json:"pool"`
			Policy    registry.ChannelPolicy              `json:"policy"`
			State     *registry.ChannelStateEntry         `json:"state"`
			Revision  uint64                              `json:"revision,omitempty"`
			Overrides map[string]registry.ChannelOverride `json:"overrides"`
		}{API: a.Name, Pool: a.Pool, Policy: a.ChannelPolicy.WithDefaults(), State: st, Overrides: ov.Channels}
		if st != nil {
			out.Revision = st.Revision
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	case "cut":
		if err := c.SetChannelOverride(ctx, api, pos[2], resilience.ChannelCut, *reason); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "channel %s of %s is held cut until `jetway channel restore %s %s`\n", pos[2], api, api, pos[2])
	case "restore":
		if *hold {
			if err := c.SetChannelOverride(ctx, api, pos[2], resilience.ChannelAvailable, *reason); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "channel %s of %s is held available until restored without --hold\n", pos[2], api)
			return nil
		}
		if err := c.ClearChannelOverride(ctx, api, pos[2]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "channel %s of %s is the controller's again\n", pos[2], api)
	case "history":
		trans, err := c.ChannelHistory(ctx, api)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "AT\tCHANNEL\tFROM\tTO\tSHARE\tBY\tCALLS\tFAILED\tREASON")
		for _, t := range trans {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.3g\t%s\t%d\t%d\t%s\n", t.At.UTC().Format(time.RFC3339), t.Channel, t.From, t.To, t.Share, t.By, t.Window.Calls, t.Window.Failures, t.Reason)
		}
		return tw.Flush()
	}
	return nil
}
