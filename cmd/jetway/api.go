package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	"github.com/jetway-gw/jetway/registry"
)

const apiUsage = `Usage: jetway api <command> [flags] [args]

Commands:
  put FILE|-               validate an API entry (JSON or YAML) and publish it
  get NAME [--revision N]  print the entry in force for an API (or revision N);
                           a newer invalid revision is named on stderr
  list                     list the published APIs, with the revision in force
  delete NAME              unpublish an API (its history stays for rollback)
  history NAME             list the kept revisions of an API: size, digest and
                           the fields each changed
  rollback NAME REVISION   publish the entry an API had at REVISION again
  promote NAME             run the draft's saved cases against that draft
                           revision through an edge as a sandbox app (--edge,
                           --key), and only if all pass publish the draft as
                           the API by compare-and-set at the revision read
                           before they ran; the draft is then removed.
                           --draft-revision N promotes only that revision,
                           --if-revision N only over production revision N
                           (0: a new API), --skip-cases untested (audited)
  test NAME                send the API's saved cases (the entry's cases) to an
                           edge (--edge, with --key for an app's API key: a
                           sandbox app's tests the sandbox tier) and report
                           each; exit 1 if one fails
  diff NAME [REV1 [REV2]]  what changed between two revisions, field by field:
                           the one before the newest and the newest, REV1 and
                           the newest, or REV1 and REV2
  import-micro SERVICE     read a NATS micro service's endpoints ($SRV.INFO) and
                           write one draft per endpoint under svc.: keyed,
                           served to sandbox apps only until promoted; --pool
                           (default the service's name), --path-prefix
                           (default /svc/SERVICE), --dry-run prints the
                           drafts; existing drafts are never overwritten
  import-openapi FILE|-    read an OpenAPI 3.0/3.1 document (JSON or YAML) and
                           write one draft per operation, like import-micro,
                           with validation of its parameters and JSON body,
                           calling --backend (default servers[0].url) + the
                           path; --pool
                           (default the title), --path-prefix (default none);
                           what is not carried over is said on stderr

--draft makes put, get, delete, history, diff and test work on the API's
draft (kept as draft.NAME): the API as it will be, served to sandbox apps
only, on the API's route or a route of its own; production apps never
reach it. A draft must require authentication.

An entry that fails validation is not written: every problem is listed with
its field path and the command exits 1. Neither is one that would take a
route from the API holding it (put, rollback): the error names the holder.

put, delete and rollback take --if-revision N: write only if the API is at
revision N now (see get, list or history); for put and rollback, N 0 means
only if the API does not exist (create only). Otherwise nothing is written
and the command exits 3 ("conflict: ..."): read the API again and retry.

Flags:
`

func cmdAPI(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jetway api", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRegistryFlags(fs)
	replicas := fs.Int("replicas", 1, "replicas if the bucket has to be created")
	getRev := fs.Uint64("revision", 0, "get: print this kept revision instead of the entry in force")
	var imp importOptions
	fs.StringVar(&imp.pool, "pool", "", "import-micro, import-openapi: the drafts' production pool (default the service's name, the document's title)")
	fs.StringVar(&imp.prefix, "path-prefix", "", "import-micro, import-openapi: route prefix of the drafts (default /svc/SERVICE; none)")
	fs.BoolVar(&imp.dryRun, "dry-run", false, "import-micro, import-openapi: print the drafts, write nothing")
	oaBackend := fs.String("backend", "", "import-openapi: the backend's base URL (default the document's servers[0].url)")
	testEdge := fs.String("edge", "http://127.0.0.1:8080", "test: the edge to send the cases to")
	testKey := fs.String("key", os.Getenv("JETWAY_API_KEY"), "test: the app's API key the cases are sent with (a sandbox app's tests the sandbox tier; env JETWAY_API_KEY)")
	onDraft := fs.Bool("draft", false, "put, get, delete, history, diff, test: the API's draft (draft.NAME) instead of the API")
	var prom promoteFlags
	fs.Uint64Var(&prom.draftRev, "draft-revision", 0, "promote: only this draft revision (default the current one)")
	fs.BoolVar(&prom.skipCases, "skip-cases", false, "promote: without running the draft's cases (recorded as promote-untested)")
	adm := addAdminFlags(fs)
	var ifRev revisionFlag
	fs.Var(&ifRev, "if-revision", "put, delete, rollback, promote: only if the API (the draft, with --draft) is at this revision now (0: only if it does not exist); exit 3 otherwise")
	fs.Usage = func() { groupUsage(stderr, fs, "api", apiUsage, args) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := checkSubcommand(fs, "api", pos, map[string]int{"put": 1, "get": 1, "list": 0, "delete": 1, "history": 1, "rollback": 2, "import-micro": 1, "import-openapi": 1, "diff": -1, "test": 1, "promote": 1}); err != nil {
		return err
	}
	if *onDraft && !slices.Contains([]string{"put", "get", "delete", "history", "diff", "test"}, pos[0]) {
		return fmt.Errorf("%w: --draft applies to put, get, delete, history, diff and test, not %s", errUsage, pos[0])
	}
	key := "" // the entry's key: NAME, or draft.NAME with --draft
	restName := ""
	if len(pos) > 1 {
		key, restName = pos[1], pos[1]
		if *onDraft {
			key = registry.DraftKey(key)
		}
	}
	// Read and validate before touching NATS: a bad file or argument fails
	// the same way whether or not NATS is up.
	var doc []byte
	var rev uint64
	if pos[0] == "rollback" {
		if rev, err = strconv.ParseUint(pos[2], 10, 64); err != nil || rev == 0 {
			return fmt.Errorf("%w: revision must be a positive number, got %q", errUsage, pos[2])
		}
	}
	var diffRevs []uint64
	if pos[0] == "diff" {
		if len(pos) < 2 || len(pos) > 4 {
			return fmt.Errorf("%w: jetway api diff takes NAME and up to two revisions", errUsage)
		}
		for _, s := range pos[2:] {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil || n == 0 {
				return fmt.Errorf("%w: revision must be a positive number, got %q", errUsage, s)
			}
			diffRevs = append(diffRevs, n)
		}
	}
	var wopts []registry.WriteOption
	if ifRev.set {
		if !slices.Contains([]string{"put", "delete", "rollback", "promote"}, pos[0]) {
			return fmt.Errorf("%w: --if-revision applies to put, delete, rollback and promote, not %s", errUsage, pos[0])
		}
		if pos[0] == "delete" && ifRev.rev == 0 {
			return fmt.Errorf("%w: delete --if-revision needs the revision to delete, not 0", errUsage)
		}
		wopts = append(wopts, registry.IfRevision(ifRev.rev))
	}
	if pos[0] == "put" {
		if doc, err = readDoc(pos[1], stdin); err != nil {
			return err
		}
		parsed, err := registry.ParseAPI("", doc)
		if err != nil {
			return describeInvalid(err, stderr, "API entry")
		}
		key, restName = parsed.Name, parsed.Name
	}
	if rest, err := adm.use(fs, slices.Contains([]string{"put", "get", "list", "delete", "test", "promote"}, pos[0])); err != nil {
		return err
	} else if rest {
		if err := refuseOverREST(fs, "revision", "edge", "replicas"); err != nil {
			return err
		}
		c, err := adm.client(*rf.timeout)
		if err != nil {
			return err
		}
		prom.key = *testKey
		if ifRev.set {
			prom.prodRev = &ifRev.rev
		}
		return apiOverREST(c, pos[0], restName, *onDraft, doc, ifRev, prom, stdout, stderr)
	}
	var drafts []draft
	if pos[0] == "import-openapi" {
		if doc, err = readDoc(pos[1], stdin); err != nil {
			return err
		}
		var warnings []string
		drafts, warnings, err = openAPIDrafts(doc, openAPIOptions{pool: imp.pool, prefix: imp.prefix, backend: *oaBackend})
		if err != nil {
			return err
		}
		for _, w := range warnings {
			fmt.Fprintln(stderr, w)
		}
		if imp.dryRun {
			return putDrafts(context.Background(), nil, drafts, true, "", stdout, stderr)
		}
	}

	ctx, c, nc, done, err := rf.dialConn(*replicas)
	if err != nil {
		return err
	}
	defer done()

	switch pos[0] {
	case "import-micro":
		return importMicro(ctx, nc, c, pos[1], imp, stdout, stderr)
	case "import-openapi":
		return putDrafts(ctx, c, drafts, false, pos[1], stdout, stderr)
	case "put":
		put, what := c.Put, "published"
		if *onDraft {
			put, what = c.PutDraft, "wrote the draft of"
		}
		a, err := put(ctx, doc, wopts...)
		if err != nil {
			return describeInvalid(err, stderr, "API entry")
		}
		fmt.Fprintf(stdout, "%s %s (%s %s -> pool %s) at revision %d\n", what, a.Name, a.Route.Method, a.Route.Path, a.Pool, a.Revision)
	case "get":
		if *getRev != 0 {
			e, err := c.GetRevision(ctx, key, *getRev)
			if err != nil {
				return err
			}
			printJSON(stdout, e.Value)
			return nil
		}
		f, err := c.GetInForce(ctx, key)
		if err != nil {
			return err
		}
		printInForce(stdout, stderr, f)
	case "list":
		fs, err := c.ListInForce(ctx)
		if err != nil {
			return err
		}
		return printAPIList(stdout, stderr, fs)
	case "delete":
		if err := c.Delete(ctx, key, wopts...); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %s\n", key)
	case "history":
		hs, err := c.History(ctx, key)
		if err != nil {
			return err
		}
		return printHistory(stdout, hs)
	case "test":
		return apiTest(ctx, c, key, *testEdge, *testKey, *rf.timeout, stdout)
	case "promote":
		prom.edge, prom.key, prom.timeout = *testEdge, *testKey, *rf.timeout
		if ifRev.set {
			prom.prodRev = &ifRev.rev
		}
		return apiPromote(ctx, c, pos[1], prom, stdout)
	case "diff":
		hs, err := c.History(ctx, key)
		if err != nil {
			return err
		}
		return printDiff(stdout, hs, diffRevs)
	case "rollback":
		a, err := c.Rollback(ctx, pos[1], rev, wopts...)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "rolled %s back to revision %d; now at revision %d\n", a.Name, rev, a.Revision)
	}
	return nil
}

// revisionFlag is --if-revision: a revision, and whether it was given at
// all (0 is a meaningful value: "must not exist").
type revisionFlag struct {
	rev uint64
	set bool
}

func (f *revisionFlag) String() string {
	if !f.set {
		return ""
	}
	return strconv.FormatUint(f.rev, 10)
}

func (f *revisionFlag) Set(v string) error {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return fmt.Errorf("want a revision number (0: must not exist), got %q", v)
	}
	f.rev, f.set = n, true
	return nil
}

func readDoc(path string, stdin io.Reader) ([]byte, error) {
	if path == "-" {
		const limit = 8 << 20
		b, err := io.ReadAll(io.LimitReader(stdin, limit+1))
		if err != nil {
			return nil, fmt.Errorf("reading stdin: %w", err)
		}
		if len(b) > limit {
			return nil, fmt.Errorf("%w: stdin holds more than %d MiB: give a file", errUsage, limit>>20)
		}
		return b, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading entry: %w", err)
	}
	return b, nil
}

// describeInvalid prints every validation problem, one per line.
func describeInvalid(err error, stderr io.Writer, what string) error {
	var ve *registry.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	fmt.Fprintf(stderr, "invalid %s; nothing was written:\n", what)
	for _, p := range ve.Problems {
		fmt.Fprintln(stderr, "  "+p.String())
	}
	return fmt.Errorf("%d problem(s) in %s", len(ve.Problems), what)
}

func printJSON(w io.Writer, b []byte) {
	var out bytes.Buffer
	if json.Indent(&out, b, "", "  ") != nil {
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	out.WriteByte('\n')
	fmt.Fprint(w, out.String())
}

// options is the flag as write options: IfRevision when given.
func (f *revisionFlag) options() []registry.WriteOption {
	if !f.set {
		return nil
	}
	return []registry.WriteOption{registry.IfRevision(f.rev)}
}
