package resilience

import (
	"fmt"
	"testing"
	"time"
)

// simulate runs n nodes sharing a limit, each asked for demand[i] calls per
// step of 1ms, exchanging reports every interval, and returns what each
// admitted over the run.
func simulate(t *testing.T, cfg RuleConfig, interval time.Duration, demand []int, steps int) []int {
	t.Helper()
	t0 := time.Unix(1000, 0)
	nodes := make([]*ClusterLimiter, len(demand))
	for i := range nodes {
		l, err := NewClusterLimiter(cfg, interval, len(demand))
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = l
	}
	admitted := make([]int, len(nodes))
	for s := 0; s < steps; s++ {
		now := t0.Add(time.Duration(s) * time.Millisecond)
		if s > 0 && time.Duration(s)*time.Millisecond%interval == 0 {
			for i, l := range nodes {
				r := l.Tick(now)
				for j, p := range nodes {
					if j != i {
						p.Observe(fmt.Sprint(i), r, now)
					}
				}
			}
		}
		for i, l := range nodes {
			for k := 0; k < demand[i]; k++ {
				if l.Take(now).Allowed {
					admitted[i]++
				}
			}
		}
	}
	return admitted
}

func TestClusterLimiterSharesOneLimit(t *testing.T) {
	cfg := RuleConfig{Limit: 1000, Window: 10 * time.Second}
	for _, tc := range []struct {
		name   string
		demand []int
	}{
		{"three equal edges", []int{5, 5, 5}},
		{"skewed load", []int{20, 2, 1}},
		{"one busy, two idle", []int{10, 0, 0}},
		{"two edges", []int{3, 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, windows := range []int{1, 3} {
				got := simulate(t, cfg, 100*time.Millisecond, tc.demand, windows*10000)
				sum := 0
				for _, n := range got {
					sum += n
				}
				if want := 1000 * windows; sum < want*95/100 || sum > want*105/100 {
					t.Fatalf("admitted %v = %d over %d windows of 10s, want %d ± 5%%", got, sum, windows, want)
				}
				t.Logf("%d window(s): %v = %d", windows, got, sum)
			}
		})
	}
}

// A burst that hits every node at once, before any report: the shares keep
// the total near the limit rather than at nodes × limit.
func TestClusterLimiterBurst(t *testing.T) {
	cfg := RuleConfig{Limit: 300, Window: time.Minute}
	got := simulate(t, cfg, 100*time.Millisecond, []int{1000, 1000, 1000}, 500)
	sum := got[0] + got[1] + got[2]
	if sum > 315 || sum < 285 {
		t.Fatalf("burst admitted %v = %d", got, sum)
	}
	t.Logf("burst on 3 nodes with limit 300: admitted %d", sum)
}

func TestClusterLimiterPeerExpires(t *testing.T) {
	l, err := NewClusterLimiter(RuleConfig{Limit: 10, Window: time.Minute}, 100*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	l.Observe("dead", ClusterReport{Count: 10, Demand: 5}, t0)
	if l.Take(t0).Allowed {
		t.Fatal("admitted past a peer's full count")
	}
	if l.Peers(t0.Add(time.Second)) != 0 {
		t.Fatal("silent peer not expired")
	}
	l.Tick(t0.Add(time.Second))
	if !l.Take(t0.Add(time.Second)).Allowed {
		t.Fatal("a dead peer's count still blocks")
	}
	if _, err := NewClusterLimiter(RuleConfig{Limit: 1, Behavior: BehaviorQueue}, time.Second, 1); err == nil {
		t.Fatal("cluster queue rule accepted")
	}
}

// Reports come off the network: a forged one is bounded by what one honest
// node could report. Negative counts cannot lift the limit, a huge demand
// cannot starve the others of their share, and the peers kept are bounded.
func TestClusterLimiterForgedReports(t *testing.T) {
	const interval = 100 * time.Millisecond
	t0 := time.Unix(1000, 0)
	run := func(forged ClusterReport, demand int) int {
		l, err := NewClusterLimiter(RuleConfig{Limit: 100, Window: time.Second}, interval, 1)
		if err != nil {
			t.Fatal(err)
		}
		admitted := 0
		for i := 0; i < 10; i++ { // one window
			now := t0.Add(time.Duration(i) * interval)
			l.Observe("forger", forged, now)
			l.Tick(now)
			for k := 0; k < demand; k++ {
				if l.Take(now).Allowed {
					admitted++
				}
			}
		}
		return admitted
	}
	if got := run(ClusterReport{Count: -1 << 40}, 100); got > 100 {
		t.Fatalf("negative counts lifted the limit: %d admitted of a limit of 100", got)
	}
	if got := run(ClusterReport{Demand: 1 << 62}, 50); got < 50 {
		t.Fatalf("a huge forged demand starved this node: %d admitted of a limit of 100", got)
	}
	l, _ := NewClusterLimiter(RuleConfig{Limit: 100, Window: time.Second}, interval, 1)
	for i := 0; i < 2*MaxClusterPeers; i++ {
		l.Observe(fmt.Sprint("fake", i), ClusterReport{}, t0)
	}
	if n := l.Peers(t0); n > MaxClusterPeers {
		t.Fatalf("%d peers kept", n)
	}
}
