package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/registry"
)

// checkSubcommand checks that pos names one of a group's commands (want:
// command → number of arguments) with the right number of arguments.
func checkSubcommand(fs *flag.FlagSet, group string, pos []string, want map[string]int) error {
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
	})
	if len(pos) == 0 {
		fs.Usage()
		return fmt.Errorf("%w: jetway %s needs a command (%s)", errUsage, group, strings.Join(names, ", "))
	}
	n, ok := want[pos[0]]
	if !ok {
		return fmt.Errorf("%w: unknown %s command %q (%s)", errUsage, group, pos[0], strings.Join(names, ", "))
	}
	if n >= 0 && len(pos)-1 != n { // n < 0: the command checks its own arguments
		return fmt.Errorf("%w: jetway %s %s takes %d argument(s), got %d", errUsage, group, pos[0], n, len(pos)-1)
	}
	return nil
}

// dialRegistry connects a CLI command to NATS and opens the registry
// buckets (creating them, with replicas, if missing). Call close when done.
func dialRegistry(ctx context.Context, natsURL string, replicas int) (c *registry.Client, close func(), err error) {
	nc, err := bus.Connect(ctx, natsURL, bus.ConnectOptions{Name: "jetway-cli"})
	if err != nil {
		return nil, nil, err
	}
	c, err = registry.NewClient(ctx, nc, registry.BucketOptions{Replicas: replicas})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return c, nc.Close, nil
}
