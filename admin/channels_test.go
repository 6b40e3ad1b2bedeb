package admin_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jetway-gw/jetway/admin"
	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/internal/jetwaytest"
)

// channelEntry is an API served by three channels, a backup among them,
// with a release of v2 when release is set.
func channelEntry(name string, release bool) string {
	rel := ""
	if release {
		rel = `,"release":{"canary":"v2","steps":[20,60],"window":"1m","min_calls":5}`
	}
	return `{"name":"` + name + `","pool":"p","route":{"path":"/` + name + `"},
		"channels":[{"name":"v1","weight":3,"backend":{"type":"mock","body":"v1"}},
		            {"name":"v2","backend":{"type":"mock","body":"v2"}},
		            {"name":"spare","backup":true,"backend":{"type":"mock","body":"spare"}}],
		"channel_policy":{"min_volume":100000}` + rel + `}`
}

type channelsBody struct {
	API      string
	Channels []struct {
		Name, State, Reason string
		Weight              int
		Backup, Judged      bool
		Share               float64
		Manual              string
		Override            *struct{ State, By, Reason string }
	}
	Policy struct {
		Threshold float64
		Window    string
		Failover  string
	}
	Overrides map[string]struct{ State, By string }
	Release   bool
}

func channelsOf(t *testing.T, r resp) channelsBody {
	t.Helper()
	var v channelsBody
	if r.status != 200 || json.Unmarshal([]byte(r.body), &v) != nil {
		t.Fatalf("channels: %d %s", r.status, r.body)
	}
	return v
}

// Channels and releases over REST, without a worker: what the API reads
// and stores. A viewer reads, an operator cuts, holds, restores and
// sends release commands, each in the audit trail under the token; an
// API without channels, an unknown channel and an API without a release
// are 404, a bad state or action 400.
func TestChannelsOverREST(t *testing.T) {
	e := start(t)
	viewer, op := e.token("viewer"), e.token("operator")
	if r := e.do(boot, "POST", "/v1/apis", channelEntry("sms.send", true)); r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "POST", "/v1/apis", channelEntry("kyc.check", false)); r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if r := e.do(boot, "POST", "/v1/apis", entry); r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}

	// Before any controller: each channel available at share 1, in the
	// entry's order, with the policy's defaults; no state, no ETag.
	got := e.do(viewer, "GET", "/v1/apis/sms.send/channels", "")
	v := channelsOf(t, got)
	if got.header.Get("ETag") != "" || len(v.Channels) != 3 || v.Channels[0].Name != "v1" || v.Channels[2].Name != "spare" ||
		v.Channels[0].Weight != 3 || v.Channels[1].Weight != 1 || !v.Channels[2].Backup || !v.Release {
		t.Fatalf("channels: %s", got.body)
	}
	for _, c := range v.Channels {
		if c.State != "available" || c.Share != 1 || c.Judged || c.Override != nil {
			t.Errorf("an unjudged channel: %+v", c)
		}
	}
	if v.Policy.Threshold != 0.9 || v.Policy.Window != "10s" || v.Policy.Failover != "safe" || !strings.Contains(got.body, `"state":null`) {
		t.Errorf("the policy's defaults, the state: %s", got.body)
	}

	for _, c := range []struct{ path, code string }{
		{"/v1/apis/orders.get/channels", "NOT_FOUND"}, {"/v1/apis/nothing/channels", "NOT_FOUND"},
		{"/v1/apis/orders.get/channels/history", "NOT_FOUND"}, {"/v1/apis/orders.get/release", "NOT_FOUND"},
		{"/v1/apis/kyc.check/release", "NOT_FOUND"},
	} {
		if r := e.do(viewer, "GET", c.path, ""); r.status != 404 || r.err.Code != c.code {
			t.Errorf("GET %s: %d %s", c.path, r.status, r.body)
		}
	}

	cut := `{"state":"cut","reason":"carrier maintenance"}`
	if r := e.do(viewer, "PUT", "/v1/apis/sms.send/channels/v2/override", cut); r.status != 403 || r.err.Code != "FORBIDDEN" {
		t.Errorf("a viewer cuts: %d %s", r.status, r.body)
	}
	if r := e.do(viewer, "DELETE", "/v1/apis/sms.send/channels/v2/override", ""); r.status != 403 {
		t.Errorf("a viewer restores: %d %s", r.status, r.body)
	}
	for _, c := range []struct {
		path, body string
		status     int
	}{
		{"/v1/apis/sms.send/channels/v9/override", cut, 404},
		{"/v1/apis/orders.get/channels/v1/override", cut, 404},
		{"/v1/apis/nothing/channels/v1/override", cut, 404},
		{"/v1/apis/sms.send/channels/v2/override", `{"state":"probing"}`, 400},
		{"/v1/apis/sms.send/channels/v2/override", `{"state":"cut","until":"never"}`, 400},
		{"/v1/apis/sms.send/channels/v2/override", `{"state":"cut"} {}`, 400},
		{"/v1/apis/sms.send/channels/v2/override", ``, 400},
		{"/v1/apis/sms.send/channels/v2/override", `{"state":"cut","reason":"` + strings.Repeat("x", 2000) + `"}`, 400},
		{"/v1/apis/sms.send/channels/v2/override", `{"state":"cut","reason":"` + strings.Repeat("x", admin.MaxBody) + `"}`, 413},
	} {
		if r := e.do(op, "PUT", c.path, c.body); r.status != c.status {
			t.Errorf("PUT %s %.40s: %d %s, want %d", c.path, c.body, r.status, r.body, c.status)
		}
	}
	if r := e.do(op, "DELETE", "/v1/apis/sms.send/channels/v9/override", ""); r.status != 404 {
		t.Errorf("restore an unknown channel: %d %s", r.status, r.body)
	}

	put := e.do(op, "PUT", "/v1/apis/sms.send/channels/v2/override", cut)
	if put.status != 200 || !strings.Contains(put.body, `"state":"cut"`) || !strings.Contains(put.body, `"by":"token:operator-1/`) {
		t.Fatalf("an operator cuts: %d %s", put.status, put.body)
	}
	if r := e.do(op, "PUT", "/v1/apis/sms.send/channels/spare/override", `{"state":"available"}`); r.status != 200 {
		t.Fatalf("an operator holds: %d %s", r.status, r.body)
	}
	v = channelsOf(t, e.do(viewer, "GET", "/v1/apis/sms.send/channels", ""))
	if o := v.Channels[1].Override; o == nil || o.State != "cut" || o.Reason != "carrier maintenance" || !strings.HasPrefix(o.By, "token:operator-1/") {
		t.Errorf("v2's override: %+v", o)
	}
	if o := v.Channels[2].Override; o == nil || o.State != "available" || v.Overrides["v2"].State != "cut" || v.Channels[0].Override != nil {
		t.Errorf("the overrides: %+v %+v", o, v.Overrides)
	}
	if r := e.do(op, "DELETE", "/v1/apis/sms.send/channels/spare/override", ""); r.status != 204 {
		t.Errorf("restore: %d %s", r.status, r.body)
	}
	if v := channelsOf(t, e.do(viewer, "GET", "/v1/apis/sms.send/channels", "")); v.Channels[2].Override != nil || v.Channels[1].Override == nil {
		t.Errorf("after the restore: %+v", v.Channels)
	}
	trail := e.do(viewer, "GET", "/v1/audit?kind=channel", "")
	var changes struct {
		Items []struct{ Actor, Action, Kind, Key string }
	}
	if trail.status != 200 || json.Unmarshal([]byte(trail.body), &changes) != nil {
		t.Fatalf("audit: %d %s", trail.status, trail.body)
	}
	var did []string
	for _, c := range changes.Items {
		if !strings.HasPrefix(c.Actor, "token:operator-1/") {
			t.Errorf("audited as %q", c.Actor)
		}
		did = append(did, c.Action+" "+c.Key)
	}
	if got := strings.Join(did, ", "); got != "cut sms.send/v2, hold sms.send/spare, restore sms.send/spare" {
		t.Errorf("the trail: %s", got)
	}
	if r := e.do(viewer, "GET", "/v1/apis/sms.send/channels/history", ""); r.status != 200 || strings.TrimSpace(r.body) != `{"items":[]}` {
		t.Errorf("history before a controller: %d %s", r.status, r.body)
	}

	// A release command is stored for the controller; without a worker,
	// nothing applies it: the state stays null.
	startCmd := `{"action":"start","reason":"v2 ready"}`
	if r := e.do(viewer, "POST", "/v1/apis/sms.send/release", startCmd); r.status != 403 {
		t.Errorf("a viewer starts: %d %s", r.status, r.body)
	}
	for _, c := range []struct {
		path, body string
		status     int
	}{
		{"/v1/apis/sms.send/release", `{"action":"launch"}`, 400},
		{"/v1/apis/sms.send/release", `{"action":"start","force":true}`, 400},
		{"/v1/apis/kyc.check/release", startCmd, 404},
		{"/v1/apis/orders.get/release", startCmd, 404},
		{"/v1/apis/nothing/release", startCmd, 404},
	} {
		if r := e.do(op, "POST", c.path, c.body); r.status != c.status {
			t.Errorf("POST %s %s: %d %s, want %d", c.path, c.body, r.status, r.body, c.status)
		}
	}
	sent := e.do(op, "POST", "/v1/apis/sms.send/release", startCmd)
	var s admin.ReleaseSent
	if sent.status != 202 || json.Unmarshal([]byte(sent.body), &s) != nil || s.Command == "" || s.Action != "start" ||
		sent.header.Get("Location") != "/v1/apis/sms.send/release" {
		t.Fatalf("start: %d %v %s", sent.status, sent.header, sent.body)
	}
	rel := e.do(viewer, "GET", "/v1/apis/sms.send/release", "")
	var rv admin.ReleaseView
	if rel.status != 200 || json.Unmarshal([]byte(rel.body), &rv) != nil || rv.Canary != "v2" || rv.State != nil || rv.History == nil ||
		rv.Command == nil || rv.Command.ID != s.Command || rv.Command.Action != "start" || rv.Command.Reason != "v2 ready" || !strings.HasPrefix(rv.Command.By, "token:operator-1/") {
		t.Fatalf("the release: %d %s", rel.status, rel.body)
	}
	if r := e.do(viewer, "GET", "/v1/audit?kind=release", ""); !strings.Contains(r.body, `"action":"start"`) || !strings.Contains(r.body, `"key":"sms.send"`) || !strings.Contains(r.body, `"actor":"token:operator-1/`) {
		t.Errorf("the release's audit: %d %s", r.status, r.body)
	}
	// The cut of v2 is still in the overrides beside the command.
	if v := channelsOf(t, e.do(viewer, "GET", "/v1/apis/sms.send/channels", "")); v.Overrides["v2"].State != "cut" {
		t.Errorf("the command lost the cut: %+v", v.Overrides)
	}
}

// With a worker, its controller applies what an operator sends over REST:
// a cut shows as the channel's stored state and in its history, a release
// start as the release's stage and percent, naming the command.
func TestChannelsControllerOverREST(t *testing.T) {
	g := jetwaytest.Start(t)
	g.Publish(channelEntry("sms.send", true))
	srv := httptest.NewServer(admin.New(admin.Options{Client: g.Client, Bootstrap: boot}).Handler())
	t.Cleanup(srv.Close)
	e := &env{t: t, url: srv.URL, c: g.Client}
	op := e.token("operator")

	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error { // the controller's first state
		r := e.do(op, "GET", "/v1/apis/sms.send/release", "")
		if r.status != 200 || !strings.Contains(r.body, `"stage":"pending"`) || r.header.Get("ETag") == "" {
			return fmt.Errorf("%d %s", r.status, r.body)
		}
		return nil
	})
	if r := e.do(op, "PUT", "/v1/apis/sms.send/channels/spare/override", `{"state":"cut","reason":"drill"}`); r.status != 200 {
		t.Fatalf("cut: %d %s", r.status, r.body)
	}
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		got := e.do(op, "GET", "/v1/apis/sms.send/channels", "")
		v := channelsOf(t, got)
		if c := v.Channels[2]; c.State != "cut" || c.Share != 0 || c.Manual != "cut" || !c.Judged || got.header.Get("ETag") == "" {
			return fmt.Errorf("spare: %+v", c)
		}
		return nil
	})
	if r := e.do(op, "GET", "/v1/apis/sms.send/channels/history", ""); r.status != 200 ||
		!strings.Contains(r.body, `"channel":"spare","from":"available","to":"cut"`) || !strings.Contains(r.body, `"by":"manual"`) {
		t.Errorf("history: %d %s", r.status, r.body)
	}

	sent := e.do(op, "POST", "/v1/apis/sms.send/release", `{"action":"start"}`)
	var s admin.ReleaseSent
	if sent.status != 202 || json.Unmarshal([]byte(sent.body), &s) != nil || s.Command == "" {
		t.Fatalf("start: %d %s", sent.status, sent.body)
	}
	natstest.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		var rv admin.ReleaseView
		r := e.do(op, "GET", "/v1/apis/sms.send/release", "")
		if r.status != 200 || json.Unmarshal([]byte(r.body), &rv) != nil || rv.State == nil ||
			rv.State.Stage != "running" || rv.State.Percent != 20 || rv.State.Command != s.Command || len(rv.History) == 0 {
			return fmt.Errorf("%d %s", r.status, r.body)
		}
		return nil
	})
}
