package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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

// natsFlags are where NATS is and how to reach it: --nats (default
// JETWAY_NATS_URL, then bus.DefaultURL) and the client TLS and
// credential files (natsAuthFlags).
type natsFlags struct {
	url  *string
	auth bus.ClientAuth
}

func natsFlag(fs *flag.FlagSet) *natsFlags {
	f := &natsFlags{url: fs.String("nats", envOr("JETWAY_NATS_URL", bus.DefaultURL), "NATS server URL (env JETWAY_NATS_URL)")}
	natsAuthFlags(fs, &f.auth)
	return f
}

// natsAuthFlags adds the flags of a NATS client's TLS and credentials,
// each defaulting from its environment variable.
func natsAuthFlags(fs *flag.FlagSet, a *bus.ClientAuth) {
	fs.StringVar(&a.CA, "nats-tls-ca", os.Getenv("JETWAY_NATS_TLS_CA"), "PEM CA file to verify the NATS server's TLS certificate with (env JETWAY_NATS_TLS_CA)")
	fs.StringVar(&a.Cert, "nats-tls-cert", os.Getenv("JETWAY_NATS_TLS_CERT"), "PEM client certificate for mutual TLS to NATS, with --nats-tls-key (env JETWAY_NATS_TLS_CERT)")
	fs.StringVar(&a.Key, "nats-tls-key", os.Getenv("JETWAY_NATS_TLS_KEY"), "PEM key of --nats-tls-cert (env JETWAY_NATS_TLS_KEY)")
	fs.StringVar(&a.Creds, "nats-creds", os.Getenv("JETWAY_NATS_CREDS"), "NATS .creds file (user JWT and NKey seed) to authenticate with (env JETWAY_NATS_CREDS)")
	fs.StringVar(&a.NKey, "nats-nkey", os.Getenv("JETWAY_NATS_NKEY"), "NATS NKey seed file to authenticate with (env JETWAY_NATS_NKEY)")
}

// connect dials NATS as the CLI command name, within ctx.
func (f *natsFlags) connect(ctx context.Context, name string) (*nats.Conn, error) {
	o, err := f.auth.Options()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	return bus.Connect(ctx, *f.url, bus.ConnectOptions{Name: name, Extra: o})
}

// registryFlags are the flags of the commands that read and write the
// registry: where NATS is and how long the command may take.
type registryFlags struct {
	nats    *natsFlags
	timeout *time.Duration
}

func addRegistryFlags(fs *flag.FlagSet) registryFlags {
	return registryFlags{nats: natsFlag(fs), timeout: fs.Duration("timeout", 5*time.Second, "how long the command may take")}
}

// dial connects to NATS and opens the registry buckets (creating them,
// with replicas, if missing), all within --timeout. Call done when finished.
func (rf registryFlags) dial(replicas int) (ctx context.Context, c *registry.Client, done func(), err error) {
	ctx, c, _, done, err = rf.dialConn(replicas)
	return ctx, c, done, err
}

// dialConn is dial that also returns the NATS connection.
func (rf registryFlags) dialConn(replicas int) (ctx context.Context, c *registry.Client, nc *nats.Conn, done func(), err error) {
	lastRegistry.Store(&rf)
	ctx, cancel := context.WithTimeout(context.Background(), *rf.timeout)
	nc, err = rf.nats.connect(ctx, "jetway-cli")
	if err != nil {
		cancel()
		return nil, nil, nil, nil, err
	}
	c, err = registry.NewClient(ctx, nc, registry.BucketOptions{Replicas: replicas})
	if err != nil {
		nc.Close()
		cancel()
		return nil, nil, nil, nil, err
	}
	c = c.WithAuditErrors(func(err error) { auditFailures.Store(&err) })
	return ctx, c, nc, func() { nc.Close(); cancel() }, nil
}

// dialJS is dial that also returns a JetStream context on the connection.
func (rf registryFlags) dialJS(replicas int) (ctx context.Context, c *registry.Client, js jetstream.JetStream, done func(), err error) {
	ctx, c, nc, done, err := rf.dialConn(replicas)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if js, err = jetstream.New(nc); err != nil {
		done()
		return nil, nil, nil, nil, err
	}
	return ctx, c, js, done, nil
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

// auditFailures is the last write of this command whose audit record could
// not be stored (registry.ErrAuditNotRecorded): the command finishes —
// prints the key it made, say — and then fails with it.
var auditFailures atomic.Pointer[error]
