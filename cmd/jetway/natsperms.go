package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/jetway-gw/jetway/bus"
)

// cmdNATSPermissions prints the permissions block of a role's user for an
// external NATS cluster: the same allow lists the embedded server gives
// (bus.RolePermissions), narrowed to pools for a worker.
func cmdNATSPermissions(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway nats-permissions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	role := fs.String("role", "", "edge or worker (required)")
	var pools stringList
	fs.Var(&pools, "pool", "narrow a worker to these pools; repeat or comma-separate (default: every pool)")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: jetway nats-permissions --role edge|worker [--pool NAME ...]

Prints the permissions block of a role's NATS user, to paste into a
nats-server configuration (see deploy/nats/README.md). Give each pool's
workers a user of their own, so that a worker of one pool cannot open the
circuits of another.

Flags:
`)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, pos[0])
	}
	if *role == "" {
		return fmt.Errorf("%w: jetway nats-permissions needs --role edge or --role worker", errUsage)
	}
	block, err := bus.PermissionsConfig(*role, pools...)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	_, err = io.WriteString(stdout, block)
	return err
}
