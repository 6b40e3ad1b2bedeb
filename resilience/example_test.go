package resilience_test

import (
	"fmt"
	"time"

	"github.com/jetway-gw/jetway/resilience"
)

// A reject rule admits at most Limit calls per sliding Window, exactly,
// and tells the refused when to come back. Time is an argument: the
// limiters are pure functions of it.
func ExampleNewLimiter() {
	l, err := resilience.NewLimiter(resilience.RuleConfig{Limit: 2, Window: time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 3 {
		d := l.Take(t0, 0)
		fmt.Println(i, d.Allowed, d.RetryAfter > 0)
	}
	fmt.Println("a second later:", l.Take(t0.Add(time.Second), 0).Allowed)
	// Output:
	// 0 true false
	// 1 true false
	// 2 false true
	// a second later: true
}
