package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetway-gw/jetway/bus/natstest"
)

// Several bad flags of a node are all listed at once, one a line, with exit
// 2, and nothing starts: no embedded NATS (its data folder and the
// credentials file are not written), no part that logs, no listener.
func TestNodeConfigProblemsAllListed(t *testing.T) {
	natsURL := natstest.RunServer(t).ClientURL()
	port := func() string { return fmt.Sprint(natstest.FreePort(t)) }
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want []string // one problem each, in any order
	}{
		{"serve, the issue's example",
			nil,
			[]string{"serve", "--log-level", "loud", "--max-conns", "-1", "--admin-token", "short", "--listen", "nope"},
			[]string{`--log-level "loud"`, "--max-conns -1: must not be negative", "--admin-token (or JETWAY_ADMIN_TOKEN) is too weak", `--listen "nope": missing port`}},
		{"serve, problems found only after NATS had started",
			nil,
			[]string{"serve", "--nats-auth", "--ip-allow", "10.0.0.300", "--trusted-proxies", "nope", "--listen", "127.0.0.1:" + port(), "--admin", "127.0.0.1:" + port()},
			[]string{"--ip-allow:", "--trusted-proxies:"}},
		{"serve, the embedded NATS address and the environment",
			map[string]string{"JETWAY_ADMIN_TOKEN": "aaaa", "OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://collector"},
			[]string{"serve", "--nats-listen", "127.0.0.1:nats", "--replicas", "6", "--demo=maybe"},
			[]string{`invalid boolean value "maybe" for -demo`, `--nats-listen "127.0.0.1:nats"`, "--replicas 6", "JETWAY_ADMIN_TOKEN) is too weak", "OTEL_EXPORTER_OTLP_ENDPOINT"}},
		{"worker on a live NATS",
			nil,
			[]string{"worker", "--nats", natsURL, "--pool", "ok,not ok", "--drain-timeout=-1s", "--log-format", "xml", "stray"},
			[]string{`--pool "not ok"`, "--drain-timeout -1s", `--log-format "xml"`, `unexpected argument "stray"`}},
		{"worker without a pool",
			nil,
			[]string{"worker", "--nats", natsURL, "--admin", "0.0.0.0:" + port()},
			[]string{"needs at least one --pool", "is not on loopback"}},
		{"edge on a live NATS",
			nil,
			[]string{"edge", "--nats", natsURL, "--max-inflight", "many", "--ip-deny", "x", "--max-header-bytes", "-1", "--read-header-timeout=-1s", "--listen", ":99999", "--admin", "127.0.0.1"},
			[]string{`invalid value "many" for flag -max-inflight`, "--ip-deny:", "--max-header-bytes -1", "--read-header-timeout -1s", `--listen ":99999": "99999" is not a port`, `--admin "127.0.0.1": missing port`}},
		{"an unknown flag ends the list: what follows was not read",
			nil,
			[]string{"worker", "--replicas", "two", "--bogus", "--pool", "a"},
			[]string{`invalid value "two" for flag -replicas`, "flag provided but not defined: -bogus"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			data := filepath.Join(t.TempDir(), "data")
			args := append(tc.args, "--data", data)
			if strings.Contains(tc.name, "unknown flag") {
				args = tc.args // --data after --bogus would not be read
			}
			var stdout, stderr bytes.Buffer
			code := run(args, strings.NewReader(""), &stdout, &stderr)
			out := strings.TrimRight(stderr.String(), "\n")
			lines := strings.Split(out, "\n")
			if code != 2 || len(lines) != len(tc.want) {
				t.Fatalf("jetway %q: exit %d with %d lines, want exit 2 with %d:\n%s", args, code, len(lines), len(tc.want), out)
			}
			for _, l := range lines {
				if !strings.HasPrefix(l, "jetway: ") {
					t.Errorf("line %q is not a listed problem: something ran", l)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("problems lack %q:\n%s", w, out)
				}
			}
			if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("--data %s was created (err %v): something started", data, err)
			}
		})
	}
}

// A good config is built whole: the address lists parsed, the logger set.
func TestNodeConfigGood(t *testing.T) {
	var stderr bytes.Buffer
	c, err := loadNodeConfig(roleEdge, []string{"--ip-allow", "10.0.0.0/8", "--trusted-proxies", "127.0.0.1", "--listen", "127.0.0.1:0", "--admin", ""}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.allow) != 1 || len(c.trusted) != 1 || c.deny != nil || c.log == nil || c.tracing != nil {
		t.Fatalf("config %+v", c)
	}
	if _, err := loadNodeConfig(roleEdge, []string{"--help"}, &stderr); !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr.String(), "Usage: jetway edge") {
		t.Fatalf("--help: %v, %q", err, stderr.String())
	}
}
