package main

import (
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus"
)

// The failover rule on a fake clock: the primary unhealthy for
// --failover-after moves calls to the standby (if it is up), healthy for
// --failback-after moves them back, a blip resets the count, 0 means back
// only when told, and a pin beats the rule.
func TestFailoverRule(t *testing.T) {
	newF := func(back time.Duration) *failover {
		sites := bus.NewSites([]string{"primary", "standby"}, []*bus.Link{bus.NewLink(bus.LinkOptions{}), bus.NewLink(bus.LinkOptions{})})
		return &failover{sites: sites, after: 5 * time.Second, back: back, pin: -1}
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	step := func(f *failover, at time.Duration, ok, standbyUp bool) int {
		to, _ := f.decide(t0.Add(at), ok, "down", standbyUp)
		f.sites.Use(to)
		return to
	}
	f := newF(10 * time.Second)
	if step(f, 0, false, true) != sitePrimary || step(f, 4*time.Second, false, true) != sitePrimary {
		t.Fatal("moved before --failover-after")
	}
	if step(f, 4500*time.Millisecond, true, true) != sitePrimary || step(f, 6*time.Second, false, true) != sitePrimary {
		t.Fatal("a healthy moment did not reset the count")
	}
	if step(f, 10*time.Second, false, false) != sitePrimary {
		t.Fatal("moved to a standby that is down")
	}
	if step(f, 11*time.Second, false, true) != siteStandby {
		t.Fatal("did not move after 5s unhealthy")
	}
	if step(f, 12*time.Second, true, true) != siteStandby || step(f, 21*time.Second, true, true) != siteStandby {
		t.Fatal("moved back before --failback-after")
	}
	if step(f, 22*time.Second, true, true) != sitePrimary {
		t.Fatal("did not move back after 10s healthy")
	}

	f = newF(0)
	step(f, 0, false, true)
	if step(f, 5*time.Second, false, true) != siteStandby || step(f, time.Hour, true, true) != siteStandby {
		t.Fatal("with --failback-after 0 the calls must stay on the standby until told")
	}
	f.pin = sitePrimary
	if step(f, time.Hour+time.Second, false, true) != sitePrimary {
		t.Fatal("a pin to the primary did not hold")
	}
}
