package edge

import (
	"reflect"
	"testing"

	"github.com/jetway-gw/jetway/schemas"
)

// A rewritten body reads back as the same value: strings with quotes,
// backslashes, control characters and any Unicode, exact numbers, nesting.
func TestEncodeBodyRoundTrips(t *testing.T) {
	for _, doc := range []string{
		`{"a":"q\"b\\c\u0001\n\t\r\u001f/é😀\u2028","n":[1,-0,1.50,1e-7,12345678901234567890],"o":{"z":null,"y":true,"x":false}}`,
		`[]`, `{}`, `"just a string"`, `[[[{"":""}]]]`,
	} {
		v, err := schemas.DecodeJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		out, err := encodeBody(v)
		if err != nil {
			t.Fatal(err)
		}
		back, err := schemas.DecodeJSON(out)
		if err != nil {
			t.Fatalf("%s: the encoding %s does not parse: %v", doc, out, err)
		}
		if !reflect.DeepEqual(v, back) {
			t.Errorf("%s: read back as %#v", doc, back)
		}
	}
}

// JSON pointer changes: escapes, arrays, "-", a missing way.
func TestBodyOpsPointers(t *testing.T) {
	v, _ := schemas.DecodeJSON([]byte(`{"a/b":{"~k":1},"list":[1,2,3]}`))
	ops := &bodyOps{
		remove: [][]string{splitPointer("/list/1"), splitPointer("/nothing/here")},
		rename: [][2][]string{{splitPointer("/a~1b/~0k"), splitPointer("/moved")}},
		set:    []bodySet{{splitPointer("/list/-"), "end"}, {splitPointer("/new/deep"), int64(1)}},
	}
	got, err := ops.apply(v)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := encodeBody(got)
	if string(out) != `{"a/b":{},"list":[1,3,"end"],"moved":1,"new":{"deep":1}}` {
		t.Fatalf("%s", out)
	}
	if _, err := (&bodyOps{set: []bodySet{{splitPointer("/list/9/x"), "v"}}}).apply(got); err == nil {
		t.Fatal("a set past an array's end went through")
	}
}
