package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/edge"
)

// cache purge reaches the edges and reports what they dropped; with no
// edge it says so and fails; a bad path is a usage error.
func TestCachePurgeCommand(t *testing.T) {
	s := natstest.RunServer(t)
	jw := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(append(args, "--nats", s.ClientURL(), "--wait", "300ms"), strings.NewReader(""), &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := jw("cache", "purge", "docs"); code != 1 || !strings.Contains(out, "no edge answered") {
		t.Fatalf("no edge: %d %s", code, out)
	}
	if code, out := jw("cache", "purge", "docs", "relative"); code != 2 {
		t.Fatalf("a relative path: %d %s", code, out)
	}
	for range 2 {
		e, err := edge.New(edge.Options{Conn: natstest.Connect(t, s)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go func() { _ = e.Run(ctx) }()
	}
	natstest.CheckFor(t, 3*time.Second, 10*time.Millisecond, func() error {
		if code, out := jw("cache", "purge", "docs", "/docs/1"); code != 0 || !strings.Contains(out, "the answers of /docs/1 of docs: 0 dropped on 2 edges") {
			return errors.New(out)
		}
		return nil
	})
}
