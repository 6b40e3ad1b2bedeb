package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
)

// An edge with a standby says in its beats which site its calls go to,
// and says it anew once they move; one without a standby says none.
func TestHeartbeatCarriesTheActiveSite(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	tr := bus.NewTracker(nc, 20*time.Millisecond)
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Stop)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	beat := func(id string, n *node) {
		b, err := bus.NewHeartbeat(nc, bus.Heartbeat{ID: id, Role: "edge"}, 20*time.Millisecond, nil)
		if err != nil {
			t.Fatal(err)
		}
		b.Detail(n.beatDetail)
		go func() { _ = b.Run(ctx) }()
	}
	siteOf := func(id string) (string, bool) {
		for _, hb := range tr.Nodes(time.Now()) {
			if hb.ID == id {
				return hb.Site, true
			}
		}
		return "", false
	}
	sites := bus.NewSites([]string{"primary", "standby"}, []*bus.Link{bus.NewLink(bus.LinkOptions{}), bus.NewLink(bus.LinkOptions{})})
	withStandby := &node{failover: &failover{sites: sites, pin: -1}}
	beat("twosites", withStandby)
	beat("onesite", &node{})
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if got, ok := siteOf("twosites"); !ok || got != "primary" {
			return fmt.Errorf("the edge with a standby beats site %q (heard: %v), want primary", got, ok)
		}
		if got, ok := siteOf("onesite"); !ok || got != "" {
			return fmt.Errorf("the edge without one beats site %q (heard: %v), want none", got, ok)
		}
		return nil
	})
	sites.Use(siteStandby)
	natstest.CheckFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		if got, _ := siteOf("twosites"); got != "standby" {
			return fmt.Errorf("after the move the edge beats site %q, want standby", got)
		}
		return nil
	})
}
