package push

import (
	"encoding/json"
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

// An answer larger than the server takes is cut to fit, saying how many
// connections there are; one that fits is whole.
func TestAnswerFitsMaxPayload(t *testing.T) {
	ans := Answer{Edge: "e1", Total: 1000}
	for i := range 1000 {
		ans.Connections = append(ans.Connections, Conn{Topic: "orders", App: "shop", Device: fmt.Sprint("device-", i), Transport: "ws"})
	}
	whole := encodeAnswer(ans, 1<<20)
	b := encodeAnswer(ans, 16<<10)
	var got Answer
	if err := json.Unmarshal(b, &got); err != nil || len(b) > 16<<10 || len(got.Connections) == 0 || len(got.Connections) >= 1000 || got.Total != 1000 {
		t.Fatalf("%d bytes, %d connections listed of %d (%v)", len(b), len(got.Connections), got.Total, err)
	}
	if err := json.Unmarshal(whole, &got); err != nil || len(got.Connections) != 1000 {
		t.Fatalf("whole: %d connections (%v)", len(got.Connections), err)
	}
}
