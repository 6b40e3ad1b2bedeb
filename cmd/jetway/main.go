// Command jetway is the one binary of the Jetway API gateway: it runs an
// all-in-one node with embedded NATS (serve), edge nodes (edge), worker pools
// (worker), and manages the registry (api).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/jetway-gw/jetway/registry"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

const usage = `jetway — a serverless-style API gateway on NATS

Usage:
  jetway <command> [flags] [args]

Nodes:
  serve     everything in one process: embedded NATS with JetStream, an edge,
            workers for every pool and the admin listener (--demo for a demo)
  edge      an HTTP edge node; run any number
  worker    a worker serving one or more pools; run any number
  admin     the admin REST API and the console, beside a cluster (no edge, no worker)

Registry:
  api       publish, inspect, delete and roll back APIs (put|get|list|delete|history|rollback|diff|test|import-micro|import-openapi)
  degrade   turn an API's degrade switch on or off, live on every edge (on|off|list)
  cache     drop an API's cached answers on every edge (purge NAME [PATH])
  fault     fault injection drills: delay or abort a share of an API's calls until
            an expiry (on|off|list)
  channel   an API's channel set: states, manual cut and restore, history
            (list|show|cut|restore|history)
  release   an API's gray release over its channels: a canary's percent raised
            step by step, rolled back on a breach (start|status|pause|resume|promote|rollback)
  app       apps, API keys, signing secrets, limits, sandbox mark, JWT issuer
            (create|get|list|disable|enable|rotate-key|rotate-secret|limit|grant|revoke|sandbox|jwt)
  cert      the edges' TLS certificates, served by SNI and rotated live (put|list|delete)
  schema    gRPC schemas (.proto or a descriptor set) that grpc backends pin by digest (put|list)
  secret    the logins of other NATS systems that a pool's nats backends call (put|list|delete)
  jsonschema JSON Schemas that request validations share as jetway:NAME (put|get|list|delete)
  topic     push topics: who publishes and subscribes, mode, retention (put|get|list|delete)

Push:
  push      publish to a topic, or subscribe and print its messages (publish|subscribe)

Observing:
  top       a live table of every API across the cluster (QPS, errors, p99, breaker, degraded)
  metric    an API's per-second records from every node
  alert     alert rules: success rate, p99, breaker opened, no workers (put|list|delete)
  report    the SLA report of a period per API and owner (md, html, json)

Other:
  nodes     list the live nodes of the cluster from their heartbeats
  standby   make a second NATS cluster a standby of this one, and see its lag (init|status)
  audit     the audit trail: every registry change, who made it and when
  dlq       the dead letters of async jobs: list, show, replay, purge
  nats-permissions
            the NATS permissions of an edge's or a pool's workers' user, for your own cluster
  version   print the version

Every command takes --help. Commands that reach NATS use --nats URL, or
JETWAY_NATS_URL, or nats://127.0.0.1:4222.
`

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "serve" || os.Args[1] == "edge" || os.Args[1] == "worker" || os.Args[1] == "admin") {
		gcDefault()
		go newTrimmer().run()
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// errUsage marks errors that should print usage and exit 2.
var errUsage = errors.New("usage")

// exitConflict is the exit code of a write refused because the entry
// changed since it was read (registry.ErrConflict, e.g. api put
// --if-revision): nothing was written, and a script can tell it from a
// failure (1) and retry after reading again.
const exitConflict = 3

// exitUnknown is the exit code of a write whose outcome is unknown
// (registry.ErrOutcomeUnknown): JetStream did not answer in time, and
// reading the key back could not show the write in force. It may have
// landed, may not have, and may still land once JetStream has quorum: a
// script must read the entry (the message names the command) before it
// writes again or reports a failure. 1 is kept for writes that surely
// failed and 3 for conflicts. A write read back in force exits 0 once its
// skipped steps are done (registry.OutcomeUnknownError.Settle: the audit
// record, a follow-up such as a promoted draft's removal), 1 saying what
// is missing when one of them fails (4 when its own write got no answer).
const exitUnknown = 4

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	auditFailures.Store(nil)
	lastRegistry.Store(nil)
	switch args[0] {
	case "serve":
		err = cmdNode(roleServe, args[1:], stderr)
	case "edge":
		err = cmdNode(roleEdge, args[1:], stderr)
	case "worker":
		err = cmdNode(roleWorker, args[1:], stderr)
	case "admin":
		err = cmdNode(roleAdmin, args[1:], stderr)
	case "api":
		err = cmdAPI(args[1:], stdin, stdout, stderr)
	case "degrade":
		err = cmdDegrade(args[1:], stdout, stderr)
	case "fault":
		err = cmdFault(args[1:], stdout, stderr)
	case "channel":
		err = cmdChannel(args[1:], stdout, stderr)
	case "release":
		err = cmdRelease(args[1:], stdout, stderr)
	case "cache":
		err = cmdCache(args[1:], stdout, stderr)
	case "app":
		err = cmdApp(args[1:], stdout, stderr)
	case "alert":
		err = cmdAlert(args[1:], stdin, stdout, stderr)
	case "cert":
		err = cmdCert(args[1:], stdout, stderr)
	case "schema":
		err = cmdSchema(args[1:], stdout, stderr)
	case "secret":
		err = cmdSecret(args[1:], stdin, stdout, stderr)
	case "jsonschema":
		err = cmdJSONSchema(args[1:], stdin, stdout, stderr)
	case "topic":
		err = cmdTopic(args[1:], stdin, stdout, stderr)
	case "push":
		err = cmdPush(args[1:], stdin, stdout, stderr)
	case "top":
		err = cmdTop(args[1:], stdout, stderr)
	case "metric":
		err = cmdMetric(args[1:], stdout, stderr)
	case "nodes":
		err = cmdNodes(args[1:], stdout, stderr)
	case "standby":
		err = cmdStandby(args[1:], stdout, stderr)
	case "audit":
		err = cmdAudit(args[1:], stdout, stderr)
	case "report":
		err = cmdReport(args[1:], stdout, stderr)
	case "dlq":
		err = cmdDLQ(args[1:], stdout, stderr)
	case "nats-permissions":
		err = cmdNATSPermissions(args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "jetway", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "jetway: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if e := auditFailures.Load(); e != nil && err == nil {
		// A write whose audit record failed has done its work (printed
		// the key it made, say); the command then says so and fails.
		err = *e
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		// A node's config problems come one a line (problems): each is
		// its own "jetway:" line.
		for _, line := range strings.Split(strings.TrimPrefix(err.Error(), "usage: "), "\n") {
			fmt.Fprintln(stderr, "jetway:", line)
		}
		return 2
	case errors.Is(err, registry.ErrOutcomeUnknown):
		var ue *registry.OutcomeUnknownError
		if errors.As(err, &ue) {
			landed, serr := settleUnknown(ue, stdout, stderr)
			switch {
			case landed && serr == nil:
				// An audit record that failed before or while settling
				// (auditFailures) is missing: the command fails saying so.
				if e := auditFailures.Load(); e != nil {
					fmt.Fprintln(stderr, "jetway: the write stands but its audit record is missing:", *e)
					return 1
				}
				return 0
			case landed:
				// The write stands; its audit record or a follow-up
				// (a promoted draft's removal, a key to show) does not.
				fmt.Fprintln(stderr, "jetway:", serr)
				if errors.Is(serr, registry.ErrOutcomeUnknown) {
					return exitUnknown
				}
				return 1
			}
		}
		fmt.Fprintln(stderr, "jetway:", err)
		return exitUnknown
	case errors.Is(err, registry.ErrConflict):
		fmt.Fprintln(stderr, "jetway:", err)
		return exitConflict
	default:
		fmt.Fprintln(stderr, "jetway:", err)
		return 1
	}
}

// parseInterspersed parses flags that may come before, between or after
// positional arguments (`jetway api put file.yaml --nats URL`).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// stringList is a repeatable flag (--pool a --pool b); commas also split.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*s = append(*s, p)
		}
	}
	return nil
}

// newLogger builds the process logger from --log-format and --log-level.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	if err := checkLogLevel(level); err != nil {
		return nil, err
	}
	if err := checkLogFormat(format); err != nil {
		return nil, err
	}
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	o := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return slog.New(slog.NewTextHandler(w, o)), nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
