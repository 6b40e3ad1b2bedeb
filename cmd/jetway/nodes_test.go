package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
)

// runBeater runs a heartbeat publisher until the test ends.
func runBeater(t *testing.T, url string, hb bus.Heartbeat) *bus.Beater {
	t.Helper()
	nc, err := bus.Connect(context.Background(), url, bus.ConnectOptions{Name: "test-node"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b, err := bus.NewHeartbeat(nc, hb, 50*time.Millisecond, func() (int64, int) { return 5, 2 })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = b.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return b
}

func TestNodesListsLiveNodes(t *testing.T) {
	url := natstest.RunServer(t).ClientURL()
	w := runBeater(t, url, bus.Heartbeat{Role: "worker", Pools: []string{"orders", "users"}, Version: "v9", Admin: "127.0.0.1:9991", Host: "box-w"})
	e := runBeater(t, url, bus.Heartbeat{Role: "edge", Version: "v9", Host: "box-e", Site: "standby"})
	s := runBeater(t, url, bus.Heartbeat{Role: "serve", Version: "v9", Host: "box-s"})

	natstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"nodes", "--nats", url, "--wait", "200ms"}, strings.NewReader(""), &stdout, &stderr); code != 0 {
			return fmt.Errorf("exit %d: %s", code, stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		if len(lines) != 4 {
			return fmt.Errorf("want a header and three nodes, got:\n%s", stdout.String())
		}
		// serve takes every pool.
		if f := strings.Fields(lines[2]); len(f) != 8 || f[0] != s.ID() || f[1] != "serve" || f[2] != "(all)" {
			return fmt.Errorf("serve line %q", lines[2])
		}
		lines = append(lines[:2], lines[3:]...)
		if f := strings.Fields(lines[0]); strings.Join(f, " ") != "ID ROLE POOLS VERSION IN-FLIGHT UPTIME ADMIN HOST SITE" {
			return fmt.Errorf("header %q", lines[0])
		}
		// Sorted by role: the edge first, with its site; the others have
		// none, and their SITE is blank.
		if f := strings.Fields(lines[1]); len(f) != 9 || f[0] != e.ID() || f[1] != "edge" || f[2] != "-" || f[4] != "5" || f[6] != "-" || f[7] != "box-e" || f[8] != "standby" {
			return fmt.Errorf("edge line %q", lines[1])
		}
		if f := strings.Fields(lines[2]); len(f) != 8 || f[0] != w.ID() || f[1] != "worker" || f[2] != "orders,users" || f[3] != "v9" || f[6] != "127.0.0.1:9991" {
			return fmt.Errorf("worker line %q", lines[2])
		}
		return nil
	})

	natstest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"nodes", "--json", "--wait", "200ms", "--nats", url}, strings.NewReader(""), &stdout, &stderr); code != 0 {
			return fmt.Errorf("exit %d: %s", code, stderr.String())
		}
		var got []bus.Heartbeat
		if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
			return fmt.Errorf("%v in %q", err, stdout.String())
		}
		if len(got) != 3 || got[2].ID != w.ID() || got[2].APIs != 2 || len(got[2].Pools) != 2 {
			return fmt.Errorf("json %+v", got)
		}
		return nil
	})
}

func TestNodesEmptyAndUsage(t *testing.T) {
	url := natstest.RunServer(t).ClientURL()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"nodes", "--json", "--wait", "50ms", "--nats", url}, strings.NewReader(""), &stdout, &stderr); code != 0 || stdout.String() != "[]\n" {
		t.Fatalf("empty cluster: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"nodes", "extra"}, 2, "takes no arguments"},
		{[]string{"nodes", "--wait", "0s"}, 2, "--wait must be positive"},
		{[]string{"nodes", "--nats", "nats://127.0.0.1:1"}, 1, "connecting to nats"},
		{[]string{"nodes", "--help"}, 0, "Usage: jetway nodes"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, strings.NewReader(""), &stdout, &stderr)
		if out := stdout.String() + stderr.String(); code != tc.code || !strings.Contains(out, tc.out) {
			t.Errorf("jetway %q: exit %d, output %q; want exit %d containing %q", tc.args, code, out, tc.code, tc.out)
		}
	}
}
