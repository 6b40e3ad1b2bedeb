package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetway-gw/jetway/bus/natstest"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/resilience"
)

// channelDoc is an API entry of route /orders/{id} with the given
// channels and extra top-level fields (each a `"field":value` pair).
func channelDoc(channels string, extra ...string) string {
	fields := []string{`"name":"orders.get"`, `"pool":"p"`, `"route":{"path":"/orders/{id}"}`}
	if channels != "" {
		fields = append(fields, `"channels":`+channels)
	}
	fields = append(fields, extra...)
	return "{" + strings.Join(fields, ",") + "}"
}

// An entry with a channel set parses: its channels in order with their
// backends (defaults applied), weights, backup, timeout and matches, and
// its policy's fields.
func TestParseAPIChannelsGood(t *testing.T) {
	doc := channelDoc(`[
		{"name":"stable","backend":{"type":"http","url":"http://127.0.0.1:9001/orders/{id}"},"weight":9,"match":{"carrier":["x","y"]}},
		{"name":"canary_2","backend":{"type":"http","url":"https://canary.example/orders/{id}"},"weight":1,"timeout":"300ms"},
		{"name":"fallback-mock","backend":{"type":"mock","json":{"ok":true}},"backup":true}]`,
		`"channel_policy":{"threshold":0.8,"window":"20s","min_volume":50,"base":"1m","max_cut":"30m","probes":3,"ramp_start":0.25,
			"probe":"shadow","failover":"always","dimensions":[{"name":"carrier","from":"header:X-Carrier"},{"name":"order","from":"param:id"}]}`)
	a, err := registry.ParseAPI("orders.get", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if !a.HasChannels() || len(a.Channels) != 3 {
		t.Fatalf("channels %+v", a.Channels)
	}
	if a.Backend.Type != "" || a.Backend.URL != "" {
		t.Fatalf("an API with channels has a backend: %+v", a.Backend)
	}
	st, ca, mock := a.Channels[0], a.Channels[1], a.Channels[2]
	if st.Name != "stable" || st.Backend.Type != "http" || st.Backend.URL != "http://127.0.0.1:9001/orders/{id}" ||
		st.WeightOrDefault() != 9 || st.Backup || !slices.Equal(st.Match["carrier"], []string{"x", "y"}) {
		t.Errorf("stable: %+v", st)
	}
	if ca.Name != "canary_2" || ca.WeightOrDefault() != 1 || time.Duration(ca.Timeout) != 300*time.Millisecond || ca.Match != nil {
		t.Errorf("canary: %+v", ca)
	}
	if mock.Name != "fallback-mock" || !mock.Backup || mock.WeightOrDefault() != 1 || mock.Backend.Type != "mock" ||
		mock.Backend.Status != 200 || string(mock.Backend.JSON) != `{"ok":true}` {
		t.Errorf("mock channel (defaults applied to its backend): %+v", mock)
	}
	p := a.ChannelPolicy
	if p == nil || p.ProbeMode() != registry.ProbeShadow || p.FailoverMode() != registry.FailoverAlways ||
		len(p.Dimensions) != 2 || p.Dimensions[0] != (registry.Dimension{Name: "carrier", From: "header:X-Carrier"}) ||
		p.Dimensions[1] != (registry.Dimension{Name: "order", From: "param:id"}) {
		t.Fatalf("policy %+v", p)
	}
	c := p.Controller()
	if c.Threshold != 0.8 || c.Window != 20*time.Second || c.MinVolume != 50 || c.Base != time.Minute ||
		c.MaxCut != 30*time.Minute || c.Probes != 3 || c.RampStart != 0.25 {
		t.Fatalf("controller policy %+v", c)
	}

	// No policy: the defaults.
	a, err = registry.ParseAPI("", []byte(channelDoc(`[{"name":"a","backend":{"type":"mock"}},{"name":"b","backend":{"type":"mock"}}]`)))
	if err != nil {
		t.Fatal(err)
	}
	if a.ChannelPolicy != nil || a.ChannelPolicy.ProbeMode() != registry.ProbeLive || a.ChannelPolicy.FailoverMode() != registry.FailoverSafe {
		t.Fatalf("policy defaults: %+v", a.ChannelPolicy)
	}
	if d := a.ChannelPolicy.Controller(); d != (resilience.ChannelPolicy{}).WithDefaults() {
		t.Fatalf("controller defaults %+v", d)
	}
}

// Every bad channel entry is refused with a problem at the field at
// fault.
func TestParseAPIChannelsProblems(t *testing.T) {
	mock := func(name string) string { return `{"name":"` + name + `","backend":{"type":"mock"}}` }
	two := "[" + mock("a") + "," + mock("b") + "]"
	policy := func(fields string) string { return `"channel_policy":{` + fields + `}` }
	carrier := policy(`"dimensions":[{"name":"carrier","from":"header:X-Carrier"}]`)
	var seventeen []string
	for i := range registry.MaxChannels + 1 {
		seventeen = append(seventeen, mock(fmt.Sprintf("c%d", i)))
	}
	for _, tc := range []struct {
		name string
		doc  string
		want []string // "path: message prefix"
	}{
		{"backend and channels", channelDoc(two, `"backend":{"type":"mock"}`),
			[]string{"backend: must not be given with channels"}},
		{"neither backend nor channels", channelDoc(""),
			[]string{"backend: is required (or channels, for a set of backends)"}},
		{"policy without channels", channelDoc("", carrier),
			[]string{"channels: channel_policy needs channels"}},
		{"policy with one backend", channelDoc("", `"backend":{"type":"mock"}`, carrier),
			[]string{"channel_policy: applies to channels only"}},
		{"duplicate names", channelDoc("[" + mock("a") + "," + mock("a") + "]"),
			[]string{`channels[1].name: "a" is named twice`}},
		{"upper-case name", channelDoc("[" + mock("Stable") + "]"),
			[]string{"channels[0].name: must be lower-case letters"}},
		{"empty name", channelDoc("[" + mock("") + "," + mock("b") + "]"),
			[]string{"channels[0].name: must be lower-case letters"}},
		{"17 channels", channelDoc("[" + strings.Join(seventeen, ",") + "]"),
			[]string{"channels: at most 16 channels"}},
		{"all backups", channelDoc(`[{"name":"a","backend":{"type":"mock"},"backup":true},{"name":"b","backend":{"type":"mock"},"backup":true}]`),
			[]string{"channels: at least one channel must not be a backup"}},
		{"negative weight", channelDoc(`[{"name":"a","backend":{"type":"mock"},"weight":-1}]`),
			[]string{"channels[0].weight: must be between 0 and 10000"}},
		{"http channel without url", channelDoc(`[` + mock("a") + `,{"name":"b","backend":{"type":"http"}}]`),
			[]string{"channels[1].backend.url: is required for http backends"}},
		{"http channel with a foreign placeholder", channelDoc(`[{"name":"a","backend":{"type":"http","url":"http://h/{oid}"}}]`),
			[]string{"channels[0].backend.url: uses {oid}, which is not a parameter of the route path"}},
		{"channel backend of no type", channelDoc(`[{"name":"a","backend":{"type":"soap"}}]`),
			[]string{"channels[0].backend.type: must be"}},
		{"match on an unknown dimension", channelDoc(`[{"name":"a","backend":{"type":"mock"},"match":{"region":["eu"]}}]`, carrier),
			[]string{"channels[0].match.region: is not a dimension of channel_policy.dimensions"}},
		{"match without a policy", channelDoc(`[{"name":"a","backend":{"type":"mock"},"match":{"carrier":["x"]}}]`),
			[]string{"channels[0].match.carrier: is not a dimension"}},
		{"empty match list", channelDoc(`[{"name":"a","backend":{"type":"mock"},"match":{"carrier":[]}},`+mock("b")+`]`, carrier),
			[]string{"channels[0].match.carrier: must list 1 to 32 values"}},
		{"match value with a comma", channelDoc(`[{"name":"a","backend":{"type":"mock"},"match":{"carrier":["x,y"]}}]`, carrier),
			[]string{`channels[0].match.carrier: "x,y" is not a value`}},
		{"match value with '='", channelDoc(`[{"name":"a","backend":{"type":"mock"},"match":{"carrier":["x=y"]}}]`, carrier),
			[]string{`channels[0].match.carrier: "x=y" is not a value`}},
		{"match value '*'", channelDoc(`[{"name":"a","backend":{"type":"mock"},"match":{"carrier":["*"]}}]`, carrier),
			[]string{`channels[0].match.carrier: "*" is not a value`}},
		{"param that is not a route parameter", channelDoc(two, policy(`"dimensions":[{"name":"x","from":"param:x"}]`)),
			[]string{`channel_policy.dimensions[0].from: "x" is not a parameter of the route path`}},
		{"unknown from kind", channelDoc(two, policy(`"dimensions":[{"name":"x","from":"cookie:x"}]`)),
			[]string{"channel_policy.dimensions[0].from: must be header:<name>, query:<name>, param:<name> or app"}},
		{"app with a name", channelDoc(two, policy(`"dimensions":[{"name":"x","from":"app:x"}]`)),
			[]string{"channel_policy.dimensions[0].from: app takes no name"}},
		{"dimension named twice", channelDoc(two, policy(`"dimensions":[{"name":"x","from":"app"},{"name":"x","from":"query:x"}]`)),
			[]string{`channel_policy.dimensions[1].name: "x" is named twice`}},
		{"bad dimension name", channelDoc(two, policy(`"dimensions":[{"name":"X","from":"app"}]`)),
			[]string{"channel_policy.dimensions[0].name: must be lower-case letters"}},
		{"four dimensions", channelDoc(two, policy(`"dimensions":[{"name":"a","from":"app"},{"name":"b","from":"query:b"},{"name":"c","from":"query:c"},{"name":"d","from":"query:d"}]`)),
			[]string{"channel_policy.dimensions: at most 3 dimensions"}},
		{"threshold 1.5", channelDoc(two, policy(`"threshold":1.5`)),
			[]string{"channel_policy.threshold: must be between 0 and 1"}},
		{"ramp_start -0.5", channelDoc(two, policy(`"ramp_start":-0.5`)),
			[]string{"channel_policy.ramp_start: must be between 0 and 1"}},
		{"window 500ms", channelDoc(two, policy(`"window":"500ms"`)),
			[]string{"channel_policy.window: must be between 1s and 1h"}},
		{"base 500ms", channelDoc(two, policy(`"base":"500ms"`)),
			[]string{"channel_policy.base: must be between 1s and 168h"}},
		{"reserved name", channelDoc("[" + mock("other") + "," + mock("b") + "]"),
			[]string{`channels[0].name: "other" is reserved`}},
		{"probe random", channelDoc(two, policy(`"probe":"random"`)),
			[]string{"channel_policy.probe: must be live, shadow or canned"}},
		{"canned without requests", channelDoc(two, policy(`"probe":"canned"`)),
			[]string{"channel_policy.probe_requests: canned probes need at least one saved request"}},
		{"requests without canned", channelDoc(two, policy(`"probe_requests":[{"path":"/h"}]`)),
			[]string{"channel_policy.probe_requests: are sent by canned probes only (probe: canned)"}},
		{"canned request with a header value that adds a header", channelDoc(two, policy(`"probe":"canned","probe_requests":[{"path":"/h","headers":{"X-A":"1\r\nX-B: 2"}}]`)),
			[]string{`channel_policy.probe_requests[0].headers: "X-A": a header name and a value without CR, LF or NUL`}},
		{"canned request with a made-up method", channelDoc(two, policy(`"probe":"canned","probe_requests":[{"path":"/h","method":"BREW"}]`)),
			[]string{"channel_policy.probe_requests[0].method: must be GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS"}},
		{"canned request without a path", channelDoc(two, policy(`"probe":"canned","probe_requests":[{"path":"h?x"}]`)),
			[]string{"channel_policy.probe_requests[0].path: must be an absolute path without query or spaces"}},
		{"failover sometimes", channelDoc(two, policy(`"failover":"sometimes"`)),
			[]string{"channel_policy.failover: must be safe, always or never"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := registry.ParseAPI("", []byte(tc.doc))
			var ve *registry.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("got %v, want *registry.ValidationError", err)
			}
			var got []string
			for _, p := range ve.Problems {
				got = append(got, p.Path+": "+p.Message)
			}
			for _, w := range tc.want {
				if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
					t.Errorf("missing problem %q in %q", w, got)
				}
			}
		})
	}
}

// The scenarios each channel serves: one value per dimension, the
// values no channel names standing as "*" (served by the channels that
// match every value).
func TestChannelSpecs(t *testing.T) {
	a, err := registry.ParseAPI("", []byte(channelDoc(`[
		{"name":"a","backend":{"type":"mock"},"match":{"carrier":["x","y"]}},
		{"name":"b","backend":{"type":"mock"},"match":{"carrier":["x"]}},
		{"name":"c","backend":{"type":"mock"}}]`,
		`"channel_policy":{"dimensions":[{"name":"carrier","from":"header:X-Carrier"}]}`)))
	if err != nil {
		t.Fatal(err)
	}
	want := []resilience.ChannelSpec{
		{Name: "a", Serves: []string{"carrier=x", "carrier=y"}},
		{Name: "b", Serves: []string{"carrier=x"}},
		{Name: "c", Serves: []string{"carrier=x", "carrier=y", "carrier=*"}},
	}
	got := a.ChannelSpecs()
	if len(got) != len(want) {
		t.Fatalf("specs %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Name != want[i].Name || !slices.Equal(got[i].Serves, want[i].Serves) {
			t.Errorf("spec %d: %+v, want %+v", i, got[i], want[i])
		}
	}

	// Without dimensions every channel serves the one scenario, "".
	a, err = registry.ParseAPI("", []byte(channelDoc(`[{"name":"a","backend":{"type":"mock"}},{"name":"b","backend":{"type":"mock"}}]`)))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range a.ChannelSpecs() {
		if !slices.Equal(s.Serves, []string{""}) {
			t.Errorf("channel %s serves %q without dimensions", s.Name, s.Serves)
		}
	}

	// Two dimensions: the cross product of each one's values.
	a, err = registry.ParseAPI("", []byte(channelDoc(`[
		{"name":"a","backend":{"type":"mock"},"match":{"carrier":["x"],"region":["eu"]}},
		{"name":"b","backend":{"type":"mock"},"match":{"region":["us"]}}]`,
		`"channel_policy":{"dimensions":[{"name":"carrier","from":"header:X-Carrier"},{"name":"region","from":"query:region"}]}`)))
	if err != nil {
		t.Fatal(err)
	}
	specs := a.ChannelSpecs()
	if !slices.Equal(specs[0].Serves, []string{"carrier=x,region=eu"}) ||
		!slices.Equal(specs[1].Serves, []string{"carrier=x,region=us", "carrier=*,region=us"}) {
		t.Fatalf("two dimensions: %+v", specs)
	}
}

// A channel serves a call when, for each dimension it matches on, the
// call's value is one it lists; dimensions it does not name never stop it.
func TestChannelServes(t *testing.T) {
	dims := []registry.Dimension{{Name: "carrier", From: "header:X-Carrier"}, {Name: "region", From: "query:region"}}
	c := registry.Channel{Name: "a", Match: map[string][]string{"carrier": {"x", "y"}}}
	for _, tc := range []struct {
		vals []string
		want bool
	}{
		{[]string{"x", "eu"}, true},
		{[]string{"y", ""}, true},
		{[]string{"z", "eu"}, false},
		{[]string{"", "eu"}, false},
		{nil, false}, // no value for a dimension it matches on
	} {
		if got := c.Serves(dims, tc.vals); got != tc.want {
			t.Errorf("Serves(%q) = %v, want %v", tc.vals, got, tc.want)
		}
	}
	all := registry.Channel{Name: "b"}
	if !all.Serves(dims, []string{"z", "us"}) || !all.Serves(dims, nil) || !all.Serves(nil, nil) {
		t.Error("a channel without match does not serve every call")
	}
}

// A stored state with a state no version knows, or a share outside
// 0..1, is refused: a worker routes by what it says.
func TestParseChannelState(t *testing.T) {
	good := `{"api":"orders.get","leader":"n1","at":"2026-01-02T03:04:05Z","channels":[
		{"name":"a","state":"available","share":1},{"name":"b","state":"ramping","share":0.25},
		{"name":"c","state":"cut","share":0},{"name":"d","state":"probing","share":0}]}`
	e, err := registry.ParseChannelState([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if e.API != "orders.get" || e.Leader != "n1" || len(e.Channels) != 4 ||
		e.Channel("b") == nil || e.Channel("b").State != resilience.ChannelRamping || e.Channel("b").Share != 0.25 || e.Channel("z") != nil {
		t.Fatalf("parsed %+v", e)
	}
	for name, doc := range map[string]string{
		"unknown state":  `{"api":"a","channels":[{"name":"a","state":"sleeping","share":1}]}`,
		"empty state":    `{"api":"a","channels":[{"name":"a","share":1}]}`,
		"share of 2":     `{"api":"a","channels":[{"name":"a","state":"available","share":2}]}`,
		"negative share": `{"api":"a","channels":[{"name":"a","state":"ramping","share":-0.1}]}`,
		"not json":       `{"api":`,
		"too big":        `{"api":"` + strings.Repeat("a", 64<<10) + `"}`,
	} {
		if _, err := registry.ParseChannelState([]byte(doc)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// A key of the channels bucket names its kind, the pool's subject token
// and the API, whose name may hold dots.
func TestChannelKeyRoundTrip(t *testing.T) {
	for _, tc := range []struct{ kind, pool, api, key, token string }{
		{registry.ChannelKeyState, "p", "orders.get", "state.p.orders.get", "p"},
		{registry.ChannelKeyLease, "eu.x", "a.b.c", "lease.eu:x.a.b.c", "eu:x"},
		{registry.ChannelKeyManual, "orders", "pay", "manual.orders.pay", "orders"},
	} {
		key := registry.ChannelKey(tc.kind, tc.pool, tc.api)
		if key != tc.key {
			t.Errorf("ChannelKey(%s, %s, %s) = %q, want %q", tc.kind, tc.pool, tc.api, key, tc.key)
		}
		kind, tok, api, ok := registry.ParseChannelKey(key)
		if !ok || kind != tc.kind || tok != tc.token || api != tc.api {
			t.Errorf("ParseChannelKey(%q) = %q %q %q %v", key, kind, tok, api, ok)
		}
	}
	for _, key := range []string{"", "state", "state.p", "state.p.", "state..a", "other.p.a", "stat.p.a"} {
		if _, _, _, ok := registry.ParseChannelKey(key); ok {
			t.Errorf("ParseChannelKey(%q) took a key of another shape", key)
		}
	}
}

// A parsed API with channels marshals without a backend field and
// parses again to the same channels.
func TestChannelAPIJSONRoundTrip(t *testing.T) {
	a, err := registry.ParseAPI("", []byte(channelDoc(`[
		{"name":"a","backend":{"type":"http","url":"http://h/orders/{id}"},"match":{"carrier":["x"]}},
		{"name":"b","backend":{"type":"mock"},"backup":true}]`,
		`"channel_policy":{"failover":"never","dimensions":[{"name":"carrier","from":"header:X-Carrier"}]}`)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	if _, ok := fields["backend"]; ok {
		t.Fatalf("an API with channels marshals a backend: %s", b)
	}
	again, err := registry.ParseAPI("", b)
	if err != nil {
		t.Fatalf("the marshalled entry does not parse: %v\n%s", err, b)
	}
	if len(again.Channels) != 2 || again.Channels[0].Backend.URL != "http://h/orders/{id}" || !again.Channels[1].Backup ||
		!slices.Equal(again.Channels[0].Match["carrier"], []string{"x"}) || again.ChannelPolicy.FailoverMode() != registry.FailoverNever {
		t.Fatalf("round trip: %+v", again)
	}
	// An API with one backend still marshals it.
	one, err := registry.ParseAPI("", []byte(channelDoc("", `"backend":{"type":"mock"}`)))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(one); !strings.Contains(string(b), `"backend":{`) {
		t.Fatalf("an API with one backend marshals without it: %s", b)
	}
}

// The channels bucket refuses a rollup: a pool's worker, which may write
// its pool's state keys, cannot wipe every pool's states and the
// operators' overrides with Nats-Rollup: all.
func TestChannelsBucketDeniesRollup(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s)
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := registry.OpenChannels(ctx, js, registry.BucketOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "manual.q.pay", []byte(`{"channels":{}}`)); err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg("$KV." + registry.BucketChannels + ".state.p.x")
	msg.Data = []byte(`{}`)
	msg.Header.Set("Nats-Rollup", "all")
	if _, err := js.PublishMsg(ctx, msg); err == nil {
		t.Fatal("a rollup was stored")
	}
	if _, err := kv.Get(ctx, "manual.q.pay"); err != nil {
		t.Fatalf("the overrides are gone: %v", err)
	}
	// Opening it again binds the same stream.
	if _, err := registry.OpenChannels(ctx, js, registry.BucketOptions{}); err != nil {
		t.Fatal(err)
	}
}
