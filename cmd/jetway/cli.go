package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

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

// natsFlag adds --nats (default JETWAY_NATS_URL, then bus.DefaultURL).
func natsFlag(fs *flag.FlagSet) *string {
	return fs.String("nats", envOr("JETWAY_NATS_URL", bus.DefaultURL), "NATS server URL (env JETWAY_NATS_URL)")
}

// registryFlags are the flags of the commands that read and write the
// registry: where NATS is and how long the command may take.
type registryFlags struct {
	natsURL *string
	timeout *time.Duration
}

func addRegistryFlags(fs *flag.FlagSet) registryFlags {
	return registryFlags{natsURL: natsFlag(fs), timeout: fs.Duration("timeout", 5*time.Second, "how long the command may take")}
}

// dial connects to NATS and opens the registry buckets (creating them,
// with replicas, if missing), all within --timeout. Call done when finished.
func (rf registryFlags) dial(replicas int) (ctx context.Context, c *registry.Client, done func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), *rf.timeout)
	nc, err := bus.Connect(ctx, *rf.natsURL, bus.ConnectOptions{Name: "jetway-cli"})
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	c, err = registry.NewClient(ctx, nc, registry.BucketOptions{Replicas: replicas})
	if err != nil {
		nc.Close()
		cancel()
		return nil, nil, nil, err
	}
	return ctx, c, func() { nc.Close(); cancel() }, nil
}

// groupUsage prints a command group's help text and flags; when args name
// one of the group's commands (jetway api put --help), it prints that
// command's synopsis and description from text instead of the whole list.
func groupUsage(w io.Writer, fs *flag.FlagSet, group, text string, args []string) {
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			continue
		}
		if synopsis, desc, ok := commandHelp(text, a); ok {
			fmt.Fprintf(w, "Usage: jetway %s %s [flags]\n\n%s\n\nFlags:\n", group, synopsis, desc)
			fs.PrintDefaults()
			return
		}
		break
	}
	fmt.Fprint(w, text)
	fs.PrintDefaults()
}

// commandHelp finds cmd's entry in a usage text's command list: a line
// indented by two spaces that starts with cmd, its synopsis and description
// parted by a run of spaces, and the description's more deeply indented
// continuation lines.
func commandHelp(text, cmd string) (synopsis, desc string, ok bool) {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		rest, found := strings.CutPrefix(l, "  "+cmd)
		if !found || (rest != "" && rest[0] != ' ') {
			continue
		}
		synopsis, d, _ := strings.Cut(strings.TrimPrefix(l, "  "), "  ")
		var parts []string
		if d = strings.TrimSpace(d); d != "" {
			parts = append(parts, "  "+d)
		}
		for _, c := range lines[i+1:] {
			if !strings.HasPrefix(c, "   ") || strings.TrimSpace(c) == "" {
				break
			}
			parts = append(parts, "  "+strings.TrimSpace(c))
		}
		return strings.TrimSpace(synopsis), strings.Join(parts, "\n"), true
	}
	return "", "", false
}
