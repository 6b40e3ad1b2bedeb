package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/otel"
)

// top and metric fold what the nodes publish each second.
func TestTopAndMetric(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				for i, node := range []string{"n1", "n2"} {
					rs := []otel.Record{{At: now.Truncate(time.Second), API: "orders.get", Node: node, Pass: 10, Block: int64(i), Success: 9, Error: 1,
						Avg: 2 * time.Millisecond, P50: 2 * time.Millisecond, P99: time.Duration(5+i) * time.Millisecond}}
					b, _ := json.Marshal(rs)
					nc.Publish(otel.MetricsSubjectPrefix+"edge."+node, b)
				}
			}
		}
	}()
	var out, errb bytes.Buffer
	if code := run([]string{"top", "--once", "--interval", "400ms", "--nats", s.ClientURL()}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("top: exit %d: %s", code, errb.String())
	}
	// The nodes' records of one second are summed; p99 is the slowest node's.
	line := ""
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "orders.get") {
			line = strings.Join(strings.Fields(l), " ")
		}
	}
	if line == "" || !strings.Contains(line, " 10.0 ") || !strings.Contains(line, " 2ms 6ms ") || !strings.HasSuffix(line, " 2 - -") {
		t.Fatalf("top row %q in\n%s", line, out.String())
	}
	out.Reset()
	if code := run([]string{"metric", "orders.get", "--seconds", "1", "--nats", s.ClientURL()}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("metric: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "|orders.get|n1|10|0|9|1|2.000|5.000") || !strings.Contains(out.String(), "|orders.get|n2|") {
		t.Fatalf("metric output:\n%s", out.String())
	}
}

// top shows, under an API with a channel set, each channel's calls, share
// and error % summed over the nodes, and its state from the controller's
// events; a cut channel without calls is shown too.
func TestTopChannels(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	stop := make(chan struct{})
	defer close(stop)
	event := func(ch, to string, share float64) []byte {
		b, _ := json.Marshal(map[string]any{"api": "sms", "channel": ch, "from": "available", "to": to, "share": share, "by": "controller", "reason": "test"})
		return b
	}
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				for node, chans := range map[string][]otel.ChannelCalls{
					"n1": {{Channel: "a", OK: 6}, {Channel: "b", OK: 1, Failed: 1}},
					"n2": {{Channel: "a", OK: 2}},
				} {
					rs := []otel.Record{{At: now.Truncate(time.Second), API: "sms", Node: node, Pass: 10, Success: 9, Error: 1, Channels: chans}}
					b, _ := json.Marshal(rs)
					nc.Publish(otel.MetricsSubjectPrefix+"edge."+node, b)
				}
				nc.Publish(bus.ChannelEventPrefix+"p.sms", event("a", "available", 1))
				nc.Publish(bus.ChannelEventPrefix+"p.sms", event("b", "ramping", 0.25))
				nc.Publish(bus.ChannelEventPrefix+"p.sms", event("c", "cut", 0))
				nc.Publish(bus.ChannelEventPrefix+"p.sms", event("d", "melted", 0)) // unknown: ignored
			}
		}
	}()
	var out, errb bytes.Buffer
	if code := run([]string{"top", "--once", "--interval", "400ms", "--nats", s.ClientURL()}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Fatalf("top: exit %d: %s", code, errb.String())
	}
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "sms" || f[0] == "↳") {
			lines = append(lines, strings.Join(f, " "))
		}
	}
	want := []string{
		"sms 20 - 0 10.0 0s 0s 0s 2 - -",
		"↳ a 8 80.0% - 0.0 - - - - available -",
		"↳ b 2 20.0% - 50.0 - - - - ramping 25% -",
		"↳ c 0 0.0% - - - - - - cut -",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows\n%s\nwant\n%s\nin\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"), out.String())
	}
}
