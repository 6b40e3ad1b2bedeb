package push

import (
	"fmt"
	"net/netip"
	"testing"
)

// A census lists the largest counts when it may not list them all, and
// leaves out those under its least; its peers' counts add up per key.
func TestCensusCounts(t *testing.T) {
	counts := map[string]int{}
	for i := range 100 {
		counts[fmt.Sprint("app", i)] = i + 1
	}
	id := func(k string) string { return k }
	top := topCounts(counts, 1, 10, id)
	if len(top) != 10 || top["app99"] != 100 || top["app90"] != 91 || top["app89"] != 0 {
		t.Errorf("the 10 largest: %v", top)
	}
	if got := topCounts(counts, 95, 20000, id); len(got) != 6 || got["app94"] != 95 {
		t.Errorf("at least 95: %v", got)
	}
	if got := topCounts(map[string]int{}, 1, 10, id); got != nil {
		t.Errorf("none: %v", got)
	}

	c := newCensus(0)
	host := netip.MustParsePrefix("10.0.0.1/32")
	c.peers["a"] = &peerCensus{apps: map[string]int{"shop": 2}, ips: map[netip.Prefix]int{host: 1}}
	c.peers["b"] = &peerCensus{apps: map[string]int{"shop": 3, "other": 1}}
	if apps, ips := c.counts("shop", host); apps != 5 || ips != 1 {
		t.Errorf("shop: %d apps, %d ips", apps, ips)
	}
	if apps, ips := c.counts("nobody", netip.Prefix{}); apps != 0 || ips != 0 {
		t.Errorf("nobody: %d %d", apps, ips)
	}
}
