package registry

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jetway-gw/jetway/expr"
)

// Classify is an API's one definition of a failed call: breakers,
// retries, fallbacks, metrics and alerts all read it (the workers decide,
// the edges count what they decided). Without it a call fails when the
// backend is unreachable or times out, or answers 5xx.
type Classify struct {
	// FailureStatuses are the statuses that fail: "5xx", "429",
	// "500-503". Default: 5xx. A status not listed succeeds, 5xx too.
	FailureStatuses []string `json:"failure_statuses,omitempty"`
	// FailureWhen, a CEL condition (package expr) on the call and its
	// answer, fails an answer it holds for: response.json.code != 0.
	FailureWhen string `json:"failure_when,omitempty"`
	// Slow fails an answer that took longer (it is still sent).
	Slow Duration `json:"slow,omitempty"`
}

// StatusRanges are FailureStatuses as [low, high] pairs (5xx by default).
func (c *Classify) StatusRanges() [][2]int {
	if len(c.FailureStatuses) == 0 {
		return [][2]int{{500, 599}}
	}
	out := make([][2]int, 0, len(c.FailureStatuses))
	for _, s := range c.FailureStatuses {
		if r, err := parseStatusRange(s); err == nil {
			out = append(out, r)
		}
	}
	return out
}

// parseStatusRange reads "5xx", "429" or "500-503".
func parseStatusRange(s string) ([2]int, error) {
	if len(s) == 3 && strings.HasSuffix(s, "xx") && s[0] >= '1' && s[0] <= '5' {
		d := int(s[0]-'0') * 100
		return [2]int{d, d + 99}, nil
	}
	lo, hi, ranged := strings.Cut(s, "-")
	a, err1 := strconv.Atoi(lo)
	b := a
	var err2 error
	if ranged {
		b, err2 = strconv.Atoi(hi)
	}
	if err1 != nil || err2 != nil || a < 100 || b > 599 || a > b {
		return [2]int{}, fmt.Errorf("%q is not a status, a range like 500-503, or a class like 5xx", s)
	}
	return [2]int{a, b}, nil
}

func (c *Classify) check(prefix string, add func(path, format string, args ...any)) {
	if c == nil {
		return
	}
	for _, s := range c.FailureStatuses {
		if _, err := parseStatusRange(s); err != nil {
			add(prefix+".failure_statuses", "%v", err)
		}
	}
	if c.FailureWhen != "" {
		if _, err := expr.Compile(c.FailureWhen); err != nil {
			add(prefix+".failure_when", "%v", err)
		}
	}
	checkTimeout(prefix+".slow", c.Slow, add)
}
