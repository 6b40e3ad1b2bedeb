package main

import (
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

const secretUsage = `Usage: jetway secret <command> [flags] [args]

Commands:
  put NAME FILE   store FILE (- reads stdin) as the secret NAME of --pool:
                  a NATS server and its login, for nats backends that call
                  services there; replaces the one stored, and workers dial
                  it anew within 30 s
  list            the stored secrets of --pool (every pool without it):
                  pool, name, revision, size, when written; never a value
  delete NAME     remove the secret NAME of --pool; the workers' connection
                  made with it ends within 30 s

A NATS server secret (docs/backends.md):
  {"url": "nats://partner:4222", "user": "jetway", "password": "..."}
  or "token", or "creds" (a .creds file's text); "ca": a PEM bundle.
An API of the pool names it in its backend:
  {"type": "nats", "subject": "orders.get", "server": {"secret": "NAME"}}
Secrets are kept in jetway_secrets: the admin writes, a pool's workers read
only their pool's, one at a time; edges none. The audit trail records that
a secret changed, never its value.

Flags:
`

func cmdSecret(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway secret", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	replicas := fs.Int("replicas", 1, "replicas of the registry buckets if they have to be created")
	pool := fs.String("pool", "", "the pool whose workers use the secret (required for put and delete)")
	fs.Usage = func() { groupUsage(stderr, fs, "secret", secretUsage, args) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := checkSubcommand(fs, "secret", pos, map[string]int{"put": 2, "list": 0, "delete": 1}); err != nil {
		return err
	}
	if pos[0] != "list" || *pool != "" {
		if *pool == "" {
			return fmt.Errorf("%w: jetway secret %s needs --pool", errUsage, pos[0])
		}
		if err := bus.ValidName(*pool); err != nil {
			return fmt.Errorf("%w: pool %q: %v", errUsage, *pool, err)
		}
	}
	var value []byte
	if pos[0] != "list" {
		if err := registry.CheckSecretName(pos[1]); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	if pos[0] == "put" {
		if value, err = readDoc(pos[2], stdin); err != nil {
			return err
		}
		if _, err := registry.ParseNATSServer(value); err != nil {
			return fmt.Errorf("secret %s: %w; nothing was written", pos[1], err)
		}
	}
	ctx, c, done, err := rf.dial(*replicas)
	if err != nil {
		return err
	}
	defer done()
	switch pos[0] {
	case "put":
		rev, err := c.PutSecret(ctx, *pool, pos[1], value)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "stored secret %s of pool %s at revision %d\n", pos[1], *pool, rev)
		fmt.Fprintf(stdout, "name it in a nats backend of the pool: \"server\": {\"secret\": %q}\n", pos[1])
	case "delete":
		if err := c.DeleteSecret(ctx, *pool, pos[1]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted secret %s of pool %s\n", pos[1], *pool)
	case "list":
		ss, err := c.ListSecrets(ctx, *pool)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "POOL\tNAME\tREVISION\tBYTES\tWRITTEN")
		for _, s := range ss {
			state := s.Updated.UTC().Format(time.RFC3339)
			if s.Err != nil {
				state += "  invalid: " + s.Err.Error()
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", s.Pool, s.Name, s.Revision, s.Size, state)
		}
		return tw.Flush()
	}
	return nil
}
