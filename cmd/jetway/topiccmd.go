package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/jetway-gw/jetway/bus"
)

const topicUsage = `Usage: jetway topic <command> [flags] [args]

Commands:
  put FILE        check a push topic (JSON or YAML; - reads stdin) and store it:
                  every edge serves it within a second
  get NAME        print a stored topic
  list            the stored topics: name, mode, retention, who publishes and subscribes
  delete NAME     remove a topic: edges refuse its publishes and end its
                  connections; its kept messages expire with their retention

A topic (schemas/topic.schema.json, docs/push.md):
  {"name": "orders", "publish": ["shop-backend"], "subscribe": ["partner.*"],
   "mode": "durable", "retention": {"max_age": "72h"}}

Flags:
`

func cmdTopic(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway topic", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	replicas := fs.Int("replicas", 1, "replicas of the registry buckets and the push stream if they have to be created")
	var ifRev revisionFlag
	fs.Var(&ifRev, "if-revision", "put, delete: only if the topic is at this revision (0 on put: only if it does not exist); exit 3 otherwise")
	fs.Usage = func() { groupUsage(stderr, fs, "topic", topicUsage, args) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := checkSubcommand(fs, "topic", pos, map[string]int{"put": 1, "get": 1, "list": 0, "delete": 1}); err != nil {
		return err
	}
	var doc []byte
	switch pos[0] {
	case "put":
		if doc, err = readDoc(pos[1], stdin); err != nil {
			return err
		}
	case "get", "delete":
		if err := bus.ValidName(pos[1]); err != nil {
			return fmt.Errorf("%w: topic name %q: %v", errUsage, pos[1], err)
		}
	}
	ctx, c, done, err := rf.dial(*replicas)
	if err != nil {
		return err
	}
	defer done()
	switch pos[0] {
	case "put":
		t, err := c.PutTopic(ctx, doc, ifRev.options()...)
		if err != nil {
			return describeInvalid(err, stderr, "topic")
		}
		fmt.Fprintf(stdout, "stored topic %s at revision %d (%s, kept %v)\n", t.Name, t.Revision, t.ModeOrDefault(), t.MaxAge())
	case "get":
		t, err := c.GetTopic(ctx, pos[1])
		if err != nil {
			return err
		}
		b, _ := json.Marshal(t)
		printJSON(stdout, b)
		fmt.Fprintf(stderr, "revision %d\n", t.Revision)
	case "list":
		ts, err := c.ListTopics(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tREVISION\tMODE\tKEPT\tPUBLISH\tSUBSCRIBE")
		for _, t := range ts {
			if t.Err != nil {
				fmt.Fprintf(tw, "%s\t%d\tinvalid: %v\n", t.Key, t.Revision, t.Err)
				continue
			}
			v := t.Value
			fmt.Fprintf(tw, "%s\t%d\t%s\t%v\t%s\t%s\n", v.Name, t.Revision, v.ModeOrDefault(), v.MaxAge(), orDash(v.Publish), orDash(v.Subscribe))
		}
		return tw.Flush()
	case "delete":
		if err := c.DeleteTopic(ctx, pos[1], ifRev.options()...); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted topic %s\n", pos[1])
	}
	return nil
}

func orDash(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}
