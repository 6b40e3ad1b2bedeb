package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/jetway-gw/jetway/registry"
)

const degradeUsage = `Usage: jetway degrade <command> [flags] [args]

Commands:
  on NAME     turn the API's degrade switch on: every edge answers it itself,
              without touching a worker, within a second
  off NAME    turn it off (deletes the switch): the API is served again
  list        list the switches

The switch lives in the JetStream KV bucket jetway_flags under key
degrade.NAME; writing it with any KV client works the same. Edges keep
applying it from their local snapshot when NATS is down.

Flags of "on":
  --status N        HTTP status of the answer (default 503)
  --body BODY       the answer's body: JSON if it parses as JSON (sent as
                    application/json), text otherwise. Without it callers get
                    {"code":"DEGRADED","message":...,"request_id":...}
  --header K:V      a response header; repeat for several
  --reason TEXT     why, for operators and the default message
  --cached          answer with the last good response the edges saw for
                    the same method, path and query (edges keep them for
                    APIs whose fallback has "cached": true); --status/--body
                    answer when there is none
  --ahead           set the switch even though the API is not published
                    (yet), or --cached though its fallback keeps no cache

A switch for an API that is not published, or --cached on an API whose
fallback has no "cached": true, is refused without --ahead: a typo would
otherwise silently do nothing.

Flags:
`

func cmdDegrade(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway degrade", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	adm := addAdminFlags(fs)
	status := fs.Int("status", 0, "HTTP status of the answer (default 503)")
	body := fs.String("body", "", "the answer's body (JSON or text)")
	reason := fs.String("reason", "", "why the API is degraded")
	ahead := fs.Bool("ahead", false, "on: set the switch although the API is not published, or --cached although it keeps no cache")
	cached := fs.Bool("cached", false, "answer with the last good response the edge saw for the same request (the API's fallback must have \"cached\": true)")
	var headers stringList
	fs.Func("header", "response header K:V; repeat for several", func(v string) error {
		headers = append(headers, v)
		return nil
	})
	fs.Usage = func() { groupUsage(stderr, fs, "degrade", degradeUsage, args) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := checkSubcommand(fs, "degrade", pos, map[string]int{"on": 1, "off": 1, "list": 0}); err != nil {
		return err
	}
	var sw *registry.Degrade
	if pos[0] == "on" {
		sw = &registry.Degrade{On: true, Reason: *reason, Cached: *cached}
		sw.Status = *status
		if *body != "" {
			if json.Valid([]byte(*body)) {
				sw.JSON = json.RawMessage(*body)
			} else {
				sw.Body = body
			}
		}
		for _, h := range headers {
			k, v, ok := strings.Cut(h, ":")
			if !ok {
				return fmt.Errorf("%w: --header %q: want Name:value", errUsage, h)
			}
			if sw.Headers == nil {
				sw.Headers = map[string]string{}
			}
			sw.Headers[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
		// Validate before dialing: a bad switch fails the same way
		// whether or not NATS is up.
		if _, err := registry.ParseDegrade(registry.DegradeKey(pos[1]), sw.Marshal()); err != nil {
			return describeInvalid(err, stderr, "degrade switch")
		}
	}

	if rest, err := adm.use(fs, pos[0] == "on" || pos[0] == "off" || pos[0] == "list"); err != nil {
		return err
	} else if rest {
		c, err := adm.client(*rf.timeout)
		if err != nil {
			return err
		}
		return degradeOverREST(c, pos[0], pos[len(pos)-1], sw, *ahead, stdout, stderr)
	}
	ctx, c, done, err := rf.dial(1)
	if err != nil {
		return err
	}
	defer done()
	switch pos[0] {
	case "on":
		if !*ahead {
			if err := checkDegradeTarget(ctx, c, pos[1], sw); err != nil {
				return err
			}
		}
		d, err := c.SetDegrade(ctx, pos[1], sw)
		if err != nil {
			return describeInvalid(err, stderr, "degrade switch")
		}
		fmt.Fprintf(stdout, "degraded %s (status %d) at revision %d\n", pos[1], statusOr(d.Status), d.Revision)
	case "off":
		if err := c.ClearDegrade(ctx, pos[1]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s is served again\n", pos[1])
	case "list":
		es, err := c.ListDegrade(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "API\tSTATE\tSTATUS\tREASON\tREVISION")
		for _, e := range es {
			if e.Err != nil {
				fmt.Fprintf(tw, "%s\tinvalid\t-\t%v\t%d\n", e.Key, e.Err, e.Revision)
				continue
			}
			state := "off"
			if e.Value.On {
				state = "on"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\n", e.Value.API, state, statusOr(e.Value.Status), e.Value.Reason, e.Revision)
		}
		return tw.Flush()
	}
	return nil
}

// checkSwitchTarget returns the API a switch is for, in force; an error
// when it is not published (a typo would otherwise silently do nothing).
func checkSwitchTarget(ctx context.Context, c *registry.Client, api string) (*registry.API, error) {
	f, err := c.GetInForce(ctx, api)
	if errors.Is(err, registry.ErrNotFound) || (err == nil && f.API == nil) {
		return nil, fmt.Errorf("api %s is not published, so the switch would do nothing; check the name (jetway api list), or pass --ahead to set it before the API is published", api)
	}
	if err != nil {
		return nil, err
	}
	return f.API, nil
}

func statusOr(s int) int {
	if s == 0 {
		return 503
	}
	return s
}

// checkDegradeTarget refuses a switch that would do nothing: one for an API
// that is not published, or a --cached one for an API whose edges keep no
// cache (its fallback lacks "cached": true).
func checkDegradeTarget(ctx context.Context, c *registry.Client, api string, sw *registry.Degrade) error {
	a, err := checkSwitchTarget(ctx, c, api)
	if err != nil {
		return err
	}
	return checkDegradeAPI(a, api, sw)
}

// checkDegradeAPI is checkDegradeTarget's check of the API in force.
func checkDegradeAPI(a *registry.API, api string, sw *registry.Degrade) error {
	if sw.Cached && (a.Fallback == nil || !a.Fallback.Cached) {
		return fmt.Errorf("api %s keeps no cached answers (its fallback lacks \"cached\": true), so --cached would give every caller the switch's own answer; add the fallback first, drop --cached, or pass --ahead", api)
	}
	return nil
}
