package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestAPIPutIfRevision checks `jetway api put --if-revision`: the write
// happens only at that revision (0: create only); otherwise nothing is
// written, the command exits 3 and says whose revision is where. Two puts
// racing from the same revision: exactly one wins.
func TestAPIPutIfRevision(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	doc := func(body string) string {
		return entry("cas.orders", "cas", "GET", "/v1/cas", mockBackend(body), nil)
	}
	put := func(body string, rev uint64) cliResult {
		return jetway(t, doc(body), "api", "put", "-", "--if-revision", strconv.FormatUint(rev, 10), "--nats", c.url)
	}
	revOf := func(r cliResult) uint64 {
		t.Helper()
		m := revisionRE.FindStringSubmatch(r.stdout)
		if r.code != 0 || m == nil {
			t.Fatalf("put: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		n, _ := strconv.ParseUint(m[1], 10, 64)
		return n
	}

	r1 := revOf(put("v1", 0))
	if r := put("again", 0); r.code != 3 || !strings.Contains(r.stderr, fmt.Sprintf("conflict: api cas.orders exists already at revision %d", r1)) {
		t.Fatalf("create of an existing API: exit %d: %s", r.code, r.stderr)
	}
	r2 := revOf(put("v2", r1))
	r := put("stale", r1)
	want := fmt.Sprintf("jetway: conflict: api cas.orders is at revision %d, not %d (changed by someone else); get it again and retry\n", r2, r1)
	if r.code != 3 || r.stderr != want {
		t.Fatalf("stale put: exit %d, stderr %q; want exit 3, %q", r.code, r.stderr, want)
	}
	if g := jetway(t, "", "api", "get", "cas.orders", "--nats", c.url); !strings.Contains(g.stdout, `"v2"`) {
		t.Fatalf("after refused put: %s", g.stdout)
	}

	// Racing puts from one revision, as two operators would.
	cur := r2
	for i := range 5 {
		var wg sync.WaitGroup
		var res [2]cliResult
		for j := range res {
			wg.Add(1)
			go func() { defer wg.Done(); res[j] = put(fmt.Sprintf("race-%d-%d", i, j), cur) }()
		}
		wg.Wait()
		codes := []int{res[0].code, res[1].code}
		if !(codes[0] == 0 && codes[1] == 3 || codes[0] == 3 && codes[1] == 0) {
			t.Fatalf("round %d: exits %v (%s | %s), want one 0 and one 3", i, codes, res[0].stderr, res[1].stderr)
		}
		winner := res[0]
		if codes[1] == 0 {
			winner = res[1]
		}
		cur = revOf(winner)
	}
}
