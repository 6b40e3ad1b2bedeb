package registry

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseTopic(t *testing.T) {
	for _, c := range []struct {
		name, key, doc, problem string
	}{
		{"minimal", "", `{"name":"orders"}`, ""},
		{"full", "orders", `{"name":"orders","publish":["shop","partner.*"],"subscribe":["*"],"auth":{"methods":["key","jwt"]},"mode":"latest_only","retention":{"max_age":"2h"},"origins":["https://shop.example","http://localhost:3000"]}`, ""},
		{"yaml", "", "name: orders\nmode: best_effort\n", ""},
		{"key differs", "other", `{"name":"orders"}`, "must equal the key"},
		{"bad name", "", `{"name":"a b"}`, "name"},
		{"wildcard name", "", `{"name":"a.*"}`, "name"},
		{"unknown field", "", `{"name":"a","bogus":1}`, "bogus"},
		{"bad mode", "", `{"name":"a","mode":"fast"}`, "mode"},
		{"bad grant", "", `{"name":"a","publish":["a b"]}`, "publish"},
		{"grant wildcard inside", "", `{"name":"a","subscribe":["a*"]}`, "subscribe"},
		{"method none", "", `{"name":"a","auth":{"methods":["none"]}}`, "auth.methods"},
		{"retention too short", "", `{"name":"a","retention":{"max_age":"10ms"}}`, "retention.max_age"},
		{"retention too long", "", `{"name":"a","retention":{"max_age":"800h"}}`, "retention.max_age"},
		{"origin with path", "", `{"name":"a","origins":["https://a.example/x"]}`, "origins"},
		{"origin null", "", `{"name":"a","origins":["null"]}`, "origins"},
		{"origin upper case", "", `{"name":"a","origins":["https://A.example"]}`, "origins"},
		{"not JSON", "", `{`, ""},
	} {
		tp, err := ParseTopic(c.key, []byte(c.doc))
		switch {
		case c.name == "not JSON":
			if err == nil {
				t.Errorf("%s: accepted", c.name)
			}
		case c.problem == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.problem != "" && (err == nil || !strings.Contains(err.Error(), c.problem)):
			t.Errorf("%s: %v (%+v), want a problem with %q", c.name, err, tp, c.problem)
		}
	}
}

func TestTopicDefaultsAndGrants(t *testing.T) {
	tp, err := ParseTopic("", []byte(`{"name":"a","publish":["shop"],"subscribe":["partner.*"],"origins":["https://a.example"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if tp.ModeOrDefault() != TopicDurable || tp.MaxAge() != 72*time.Hour || strings.Join(tp.Methods(), ",") != "key" {
		t.Errorf("defaults: %s %v %v", tp.ModeOrDefault(), tp.MaxAge(), tp.Methods())
	}
	be, _ := ParseTopic("", []byte(`{"name":"b","mode":"best_effort"}`))
	if be.MaxAge() != 5*time.Minute {
		t.Errorf("best_effort keeps %v", be.MaxAge())
	}
	for app, want := range map[string]bool{"shop": true, "shop2": false, "partner.x": false} {
		if tp.MayPublish(app) != want {
			t.Errorf("publish %s: %v", app, !want)
		}
	}
	for app, want := range map[string]bool{"partner.x": true, "partner": false, "partnerx": false, "shop": false} {
		if tp.MaySubscribe(app) != want {
			t.Errorf("subscribe %s: %v", app, !want)
		}
	}
	for origin, want := range map[string]bool{"": true, "https://a.example": true, "null": false, "https://b.example": false, "https://a.example.evil": false} {
		if tp.AllowsOrigin(origin) != want {
			t.Errorf("origin %q: %v", origin, !want)
		}
	}
}

// The example topics are valid entries.
func TestExampleTopics(t *testing.T) {
	files, err := filepath.Glob("../examples/topics/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseTopic("", b); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
