package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/jetway-gw/jetway/bus"
)

const jsonSchemaUsage = `Usage: jetway jsonschema <command> [flags] [args]

Commands:
  put NAME FILE   check a JSON Schema (2020-12; JSON or YAML; - reads stdin) and
                  store it under NAME: every edge recompiles the validations
                  that reference it, within a second
  get NAME        print a stored schema
  list            the stored schemas: name, revision, size
  delete NAME     remove a schema no API references

An API's validate block references a shared schema as {"$ref": "jetway:NAME"}
(a fragment may follow: "jetway:NAME#/$defs/item"), alone or composed with
its own keywords. No other reference is followed: an entry never makes an
edge read a file or a URL. api put refuses a reference to a schema that is
not stored. Bucket jetway_jsonschemas: the admin writes, edges read.

Flags:
`

func cmdJSONSchema(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway jsonschema", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	replicas := fs.Int("replicas", 1, "replicas of the registry buckets if they have to be created")
	fs.Usage = func() { groupUsage(stderr, fs, "jsonschema", jsonSchemaUsage, args) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := checkSubcommand(fs, "jsonschema", pos, map[string]int{"put": 2, "get": 1, "list": 0, "delete": 1}); err != nil {
		return err
	}
	var doc []byte
	if pos[0] != "list" {
		if err := bus.ValidName(pos[1]); err != nil {
			return fmt.Errorf("%w: schema name %q: %v", errUsage, pos[1], err)
		}
	}
	if pos[0] == "put" {
		if doc, err = readDoc(pos[2], stdin); err != nil {
			return err
		}
	}
	ctx, c, done, err := rf.dial(*replicas)
	if err != nil {
		return err
	}
	defer done()
	switch pos[0] {
	case "put":
		s, err := c.PutJSONSchema(ctx, pos[1], doc)
		if err != nil {
			return describeInvalid(err, stderr, "json schema "+pos[1])
		}
		fmt.Fprintf(stdout, "stored json schema %s at revision %d; reference it as {\"$ref\": \"jetway:%s\"}\n", s.Name, s.Revision, s.Name)
	case "get":
		s, err := c.GetJSONSchema(ctx, pos[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", s.Schema)
	case "list":
		ss, err := c.ListJSONSchemas(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tREVISION\tBYTES")
		for _, s := range ss {
			if s.Err != nil {
				fmt.Fprintf(tw, "%s\t%d\tinvalid: %v\n", s.Key, s.Revision, s.Err)
				continue
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\n", s.Key, s.Revision, len(s.Value.Schema))
		}
		return tw.Flush()
	case "delete":
		if err := c.DeleteJSONSchema(ctx, pos[1]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted json schema %s\n", pos[1])
	}
	return nil
}
