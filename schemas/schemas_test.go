package schemas

import (
	"encoding/json"
	"testing"
)

func TestSchemaIsValidJSON(t *testing.T) {
	for _, s := range []*schema{apiSchema, degradeSchema} {
		var v map[string]any
		if err := json.Unmarshal(s.doc, &v); err != nil {
			t.Fatal(s.name, err)
		}
		if _, err := s.compiled(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestValidateAPI(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want []Problem
	}{
		{`{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"mock"}}`, nil},
		{`{"name":"a","pool":"p","route":{"path":"/a"},"backend":{"type":"http","url":"http://h"},"timeout":"1m30s","max_body":"512 KiB"}`, nil},
		{`[1]`, []Problem{{"", "got array, want object"}}},
		{`{"name":"a b","pool":"p","route":{"path":"/a","x":1},"backend":{"type":"http"}}`, []Problem{
			{"backend", "missing property 'url'"},
			{"name", `'a b' does not match pattern '^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)*$'`},
			{"route", "additional properties 'x' not allowed"},
		}},
	} {
		got := ValidateAPI([]byte(tc.doc))
		if len(got) != len(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.doc, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: problem %d = %q, want %q", tc.doc, i, got[i], tc.want[i])
			}
		}
	}
}

func TestValidateDegrade(t *testing.T) {
	if ps := ValidateDegrade([]byte(`{"on":true,"status":503,"json":{"x":1},"reason":"db migration"}`)); ps != nil {
		t.Errorf("valid switch: %v", ps)
	}
	if ps := ValidateDegrade([]byte(`{"status":"x","extra":1}`)); len(ps) != 3 {
		t.Errorf("got %v", ps)
	}
}
