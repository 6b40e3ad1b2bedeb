package registry

import (
	"strings"
	"testing"
)

// A job id is its pool's token, a dot and 26 base32 letters, with a
// queued job's stream sequence after a '-'; the pool token may hold '-'
// itself.
func TestJobIDShapes(t *testing.T) {
	base := NewJobID("eu.sms-gw")
	for _, c := range []struct {
		id   string
		pool string
		seq  uint64
	}{
		{base, "eu:sms-gw", 0},
		{JobSeqID(base, 1), "eu:sms-gw", 1},
		{JobSeqID(base, 18446744073709551615), "eu:sms-gw", 18446744073709551615},
		{IdempotentJobID("reports", "k", "app", "key"), "reports", 0},
	} {
		tok, b, seq, ok := parseJobID(c.id)
		if !ok || tok != c.pool || seq != c.seq || (seq != 0 && b != base) || !ValidJobID(c.id) {
			t.Errorf("%s: pool %q base %q seq %d ok %v", c.id, tok, b, seq, ok)
		}
	}
	for _, bad := range []string{
		"", base + "-", base + "-0", base + "-01", base + "-+1", base + "--1", base + "-1x", base + "-18446744073709551616",
		base[:len(base)-1], base + "a", strings.ToUpper(base), "." + base[len(base)-26:], "a.b" + base[len(base)-27:],
	} {
		if ValidJobID(bad) {
			t.Errorf("%q is taken for a job id", bad)
		}
	}
}
