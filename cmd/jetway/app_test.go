package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
)

type cmdResult struct {
	code           int
	stdout, stderr string
}

func runCmd(stdin string, args ...string) cmdResult {
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb)
	return cmdResult{code, out.String(), errb.String()}
}

// concurrently runs each command line at once and returns their results.
func concurrently(lines ...[]string) []cmdResult {
	res := make([]cmdResult, len(lines))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, args := range lines {
		wg.Add(1)
		go func() { defer wg.Done(); <-start; res[i] = runCmd("", args...) }()
	}
	close(start)
	wg.Wait()
	return res
}

var shownKey = regexp.MustCompile(`API key \(shown once, store it now\): (\S+)`)

// The issue's races, through the commands: `app rotate-key` with `app
// grant`, `app disable` with `app grant`, several grants. Every command
// that says it succeeded is what is stored, and no change is lost.
func TestAppCommandsConcurrent(t *testing.T) {
	s := natstest.RunServer(t)
	url := s.ClientURL()
	c, err := registry.NewClient(context.Background(), natstest.Connect(t, s), registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	get := func(id string) *registry.App {
		t.Helper()
		a, err := c.GetApp(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	ok := func(round int, rs []cmdResult) {
		t.Helper()
		for _, r := range rs {
			if r.code != 0 {
				t.Fatalf("round %d: exit %d: %s%s", round, r.code, r.stdout, r.stderr)
			}
		}
	}
	for i := range 30 {
		id := fmt.Sprintf("shop%d", i)
		if r := runCmd("", "app", "create", id, "--nats", url); r.code != 0 {
			t.Fatalf("create: %s", r.stderr)
		}
		rs := concurrently(
			[]string{"app", "rotate-key", id, "--nats", url},
			[]string{"app", "grant", id, "orders.*", "--nats", url},
		)
		ok(i, rs)
		m := shownKey.FindStringSubmatch(rs[0].stdout)
		if m == nil {
			t.Fatalf("rotate-key printed no key: %q", rs[0].stdout)
		}
		a := get(id)
		if len(a.Keys) != 1 || a.Keys[0].SHA256 != registry.KeyDigest(m[1]) {
			t.Errorf("round %d: rotate-key said the old keys no longer work, but the stored keys are %+v", i, a.Keys)
		}
		if !slices.Equal(a.APIs, []string{"orders.*"}) {
			t.Errorf("round %d: grant lost after rotate-key: %q", i, a.APIs)
		}

		ok(i, concurrently(
			[]string{"app", "disable", id, "--nats", url},
			[]string{"app", "grant", id, "billing.*", "--nats", url},
			[]string{"app", "grant", id, "users.get", "--nats", url},
		))
		a = get(id)
		if a.Status != registry.AppDisabled {
			t.Errorf("round %d: the disable was undone", i)
		}
		if got := slices.Sorted(slices.Values(a.APIs)); !slices.Equal(got, []string{"billing.*", "orders.*", "users.get"}) {
			t.Errorf("round %d: grants lost: %q", i, got)
		}
	}
	// Creating an app twice is refused, not an overwrite of its key.
	if r := runCmd("", "app", "create", "shop0", "--nats", url); r.code != 1 || !strings.Contains(r.stderr, "exists already") {
		t.Fatalf("second create: exit %d: %s", r.code, r.stderr)
	}
}

// `api put --if-revision` and its conflict, in-process (the e2e test runs
// the binary): exit 3 and the message naming both revisions.
func TestAPIPutIfRevision(t *testing.T) {
	s := natstest.RunServer(t)
	url := s.ClientURL()
	doc := func(body string) string {
		return fmt.Sprintf(`{"name":"cas.a","pool":"p","route":{"path":"/cas"},"backend":{"type":"mock","body":%q}}`, body)
	}
	rev := regexp.MustCompile(`at revision (\d+)`)
	r := runCmd(doc("1"), "api", "put", "-", "--if-revision", "0", "--nats", url)
	if r.code != 0 {
		t.Fatalf("create: exit %d: %s", r.code, r.stderr)
	}
	r1 := rev.FindStringSubmatch(r.stdout)[1]
	if r := runCmd(doc("1"), "api", "put", "-", "--if-revision", "0", "--nats", url); r.code != exitConflict || !strings.Contains(r.stderr, "exists already at revision "+r1) {
		t.Fatalf("second create: exit %d: %s", r.code, r.stderr)
	}
	r = runCmd(doc("2"), "api", "put", "-", "--if-revision", r1, "--nats", url)
	if r.code != 0 {
		t.Fatalf("put at %s: exit %d: %s", r1, r.code, r.stderr)
	}
	r2 := rev.FindStringSubmatch(r.stdout)[1]
	want := fmt.Sprintf("jetway: conflict: api cas.a is at revision %s, not %s (changed by someone else); get it again and retry\n", r2, r1)
	for _, args := range [][]string{
		{"api", "put", "-", "--if-revision", r1},
		{"api", "rollback", "cas.a", r1, "--if-revision", r1},
		{"api", "delete", "cas.a", "--if-revision", r1},
	} {
		if r := runCmd(doc("3"), append(args, "--nats", url)...); r.code != exitConflict || r.stderr != want {
			t.Errorf("%q: exit %d, stderr %q; want exit %d, %q", args, r.code, r.stderr, exitConflict, want)
		}
	}
	for _, tc := range []struct {
		args []string
		out  string
	}{
		{[]string{"api", "delete", "cas.a", "--if-revision", "0"}, "needs the revision to delete"},
		{[]string{"api", "get", "cas.a", "--if-revision", "1"}, "applies to put, delete, rollback and promote"},
		{[]string{"api", "put", "-", "--if-revision", "-1"}, "want a revision number"},
	} {
		if r := runCmd(doc("4"), append(tc.args, "--nats", url)...); r.code == 0 || !strings.Contains(r.stderr, tc.out) {
			t.Errorf("%q: exit %d, stderr %q", tc.args, r.code, r.stderr)
		}
	}
	if r := runCmd("", "api", "delete", "cas.a", "--if-revision", r2, "--nats", url); r.code != 0 {
		t.Fatalf("delete at %s: exit %d: %s", r2, r.code, r.stderr)
	}
}

// A raw write on a wildcard key makes a key no KV call reads: `api list`
// and `app list` show it as invalid and list the rest, exit 0.
func TestListWithWildcardKey(t *testing.T) {
	s := natstest.RunServer(t)
	url := s.ClientURL()
	nc := natstest.Connect(t, s)
	good := `{"name":"good","pool":"p","route":{"path":"/good"},"backend":{"type":"mock"}}`
	if r := runCmd(good, "api", "put", "-", "--nats", url); r.code != 0 {
		t.Fatal(r.stderr)
	}
	if r := runCmd("", "app", "create", "shop", "--nats", url); r.code != 0 {
		t.Fatal(r.stderr)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"$KV.jetway_apis.*", "$KV.jetway_apps.*"} {
		if _, err := js.Publish(context.Background(), subj, []byte(good)); err != nil {
			t.Fatal(err)
		}
	}
	r := runCmd("", "api", "list", "--nats", url)
	if r.code != 0 || !regexp.MustCompile(`(?m)^\*\s+-\s+\(invalid key: not served\)`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^good\s+p\s+GET /good`).MatchString(r.stdout) || !strings.Contains(r.stderr, `"*" is not a valid key`) {
		t.Fatalf("api list: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	r = runCmd("", "app", "list", "--nats", url)
	if r.code != 0 || !regexp.MustCompile(`(?m)^\*\s+-\s+invalid`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^shop\s`).MatchString(r.stdout) {
		t.Fatalf("app list: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}
