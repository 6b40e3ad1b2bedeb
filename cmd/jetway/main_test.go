package main

import (
	"bytes"
	"flag"
	"reflect"
	"strings"
	"testing"
)

func TestParseInterspersed(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	nats := fs.String("nats", "", "")
	var pools stringList
	fs.Var(&pools, "pool", "")
	pos, err := parseInterspersed(fs, []string{"put", "file.yaml", "--nats", "nats://x", "--pool", "a,b", "-pool=c", "--", "--literal"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pos, []string{"put", "file.yaml", "--literal"}) || *nats != "nats://x" || !reflect.DeepEqual([]string(pools), []string{"a", "b", "c"}) {
		t.Fatalf("pos %q nats %q pools %q", pos, *nats, pools)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{nil, 2, "Usage:"},
		{[]string{"bogus"}, 2, `unknown command "bogus"`},
		{[]string{"worker", "--nats", "nats://127.0.0.1:1"}, 2, "needs at least one --pool"},
		{[]string{"api"}, 2, "needs a command"},
		{[]string{"api", "get"}, 2, "takes 1 argument(s), got 0"},
		{[]string{"api", "rollback", "a", "x", "--nats", "nats://127.0.0.1:1"}, 2, "revision must be a positive number"},
		{[]string{"api", "list", "--nats", "nats://127.0.0.1:1", "--timeout", "200ms"}, 1, "connecting to nats"},
		{[]string{"serve", "--log-level", "loud"}, 2, "--log-level"},
		{[]string{"version"}, 0, ""},
		{[]string{"serve", "--help"}, 0, "Usage: jetway serve"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, strings.NewReader(""), &stdout, &stderr)
		out := stdout.String() + stderr.String()
		if code != tc.code || !strings.Contains(out, tc.out) {
			t.Errorf("jetway %q: exit %d, output %q; want exit %d containing %q", tc.args, code, out, tc.code, tc.out)
		}
	}
}

// An invalid entry is refused before NATS is even contacted.
func TestAPIPutInvalidNeedsNoNATS(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"api", "put", "-", "--nats", "nats://127.0.0.1:1"}, strings.NewReader("name: x\npool: p\nroute: {path: nope}\nbackend: {type: mock}\n"), &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), `route.path: must start with "/"`) {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

// jetway GROUP CMD --help shows that command's synopsis, not the group's
// whole list.
func TestCommandHelp(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		want, not string
	}{
		{[]string{"api", "put", "--help"}, "Usage: jetway api put FILE|- [flags]\n\n  validate an API entry", "rollback NAME REVISION"},
		{[]string{"app", "jwt", "--help"}, "Usage: jetway app jwt ID --issuer ISS", "rotate-key"},
		{[]string{"degrade", "off", "--help"}, "Usage: jetway degrade off NAME [flags]", "list "},
		{[]string{"api", "--help"}, "Commands:\n  put FILE|-", ""},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, strings.NewReader(""), &stdout, &stderr)
		out := stdout.String() + stderr.String()
		if code != 0 || !strings.Contains(out, tc.want) || (tc.not != "" && strings.Contains(out, tc.not)) {
			t.Errorf("jetway %q: exit %d, output %q; want %q and not %q", tc.args, code, out, tc.want, tc.not)
		}
	}
}

func TestChangedFields(t *testing.T) {
	for _, tc := range []struct{ prev, cur, want string }{
		{"", `{"a":1}`, "(created)"},
		{`{"a":1,"b":{"url":"x","type":"http"}}`, `{"a":1,"b":{"url":"y","type":"http"}}`, "b.url"},
		{`{"a":1}`, `{ "a" : 1 }`, "(same value)"},
		{`{"a":1,"t":"1s"}`, `{"a":2,"n":true}`, "a, n, t"},
		{`{"a":1}`, `{"a":`, "(whole value)"},
	} {
		var prev []byte
		if tc.prev != "" {
			prev = []byte(tc.prev)
		}
		if got := changedFields(prev, []byte(tc.cur)); got != tc.want {
			t.Errorf("changedFields(%s, %s) = %q, want %q", tc.prev, tc.cur, got, tc.want)
		}
	}
}

// serve --nats-auth sets up the embedded server's users; with a NATS URL
// from --nats or JETWAY_NATS_URL nothing is embedded, and the combination
// is refused before anything starts, saying where the URL came from.
func TestServeNATSAuthWithURL(t *testing.T) {
	for _, args := range [][]string{
		// --log-level loud is refused after this check: without the check
		// the node stops at once with another message.
		{"serve", "--nats-auth", "--nats", "nats://127.0.0.1:1", "--log-level", "loud"},
		{"serve", "--nats", "nats://127.0.0.1:1", "--nats-auth=true", "--log-level", "loud"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(args, strings.NewReader(""), &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), "--nats-auth") || !strings.Contains(stderr.String(), "--nats is given") {
			t.Errorf("jetway %q: exit %d, stderr %q", args, code, stderr.String())
		}
	}
	t.Setenv("JETWAY_NATS_URL", "nats://127.0.0.1:1")
	var stdout, stderr bytes.Buffer
	code := run([]string{"serve", "--nats-auth", "--data", t.TempDir(), "--log-level", "loud"}, strings.NewReader(""), &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "JETWAY_NATS_URL is set") {
		t.Errorf("JETWAY_NATS_URL and --nats-auth: exit %d, stderr %q", code, stderr.String())
	}
}
