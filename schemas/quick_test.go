package schemas

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// quickSchemas use every keyword the quick check knows, in the ways
// request schemas do.
var quickSchemas = []string{
	`{"type":"object","additionalProperties":false,"required":["id","n"],"properties":{
		"id":{"type":"string","pattern":"^[a-z]{2}[0-9]?$","minLength":2,"maxLength":3},
		"n":{"type":"integer","minimum":-2,"maximum":3},"x":{"type":"number","exclusiveMinimum":0.5,"exclusiveMaximum":2.5,"multipleOf":0.5},
		"e":{"enum":["a",1,1.5,null,true,[1],{"k":1}]},"c":{"const":2},"f":{"type":"string","format":"email"},
		"t":{"type":["string","null"]},"s":{"minLength":2,"maxLength":3}}}`,
	`{"$defs":{"item":{"type":"object","required":["q"],"properties":{"q":{"type":"integer","minimum":1}},"additionalProperties":{"type":"string"}}},
		"type":"array","minItems":1,"maxItems":3,"prefixItems":[{"const":"head"}],"items":{"$ref":"#/$defs/item"}}`,
	`{"anyOf":[{"type":"string","maxLength":1},{"type":"integer","multipleOf":2}],"allOf":[{"not_a_keyword":1},{"type":["string","number"]}]}`,
	`{"type":"object","minProperties":1,"maxProperties":2,"patternProperties":{"^a":{"type":"integer"},"b$":{"minimum":0}},"additionalProperties":false}`,
	`{"$defs":{"tree":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/tree"}}},"additionalProperties":false}},"$ref":"#/$defs/tree"}`,
	`{"properties":{"big":{"maximum":9007199254740993},"neg":{"minimum":-1.5}}}`,
	`true`, `false`,
}

// randomValue is a JSON value near the values the schemas above talk
// about, so that both answers come up often.
func randomValue(r *rand.Rand, depth int) string {
	scalars := []string{`"a"`, `"ab"`, `"ab1"`, `"abc"`, `"A1"`, `""`, `"head"`, `"x@example.com"`, `"not an email"`, `"é"`, `"éé"`, `"ééé"`, `"éééé"`,
		`0`, `1`, `2`, `3`, `4`, `-2`, `-3`, `1.0`, `1.5`, `2.5`, `0.5`, `1e0`, `2E0`, `15e-1`, `-1.5`, `-1.6`, `9007199254740993`, `9007199254740994`,
		`99999999999999999999`, `true`, `false`, `null`}
	if depth > 3 || r.IntN(3) > 0 {
		return scalars[r.IntN(len(scalars))]
	}
	keys := []string{"id", "n", "x", "e", "c", "f", "t", "q", "a1", "b", "ab", "zz", "v", "kids", "big", "neg", "k", "s"}
	if r.IntN(2) == 0 {
		var items []string
		for range r.IntN(5) {
			items = append(items, randomValue(r, depth+1))
		}
		return "[" + strings.Join(items, ",") + "]"
	}
	seen := map[string]bool{}
	var members []string
	for range r.IntN(6) {
		k := keys[r.IntN(len(keys))]
		if seen[k] {
			continue
		}
		seen[k] = true
		members = append(members, fmt.Sprintf("%q:%s", k, randomValue(r, depth+1)))
	}
	return "{" + strings.Join(members, ",") + "}"
}

// quickSeeds are valid values of quickSchemas, mutated one leaf at a time
// so that values near the edge of valid come up often.
var quickSeeds = map[string][]string{
	quickSchemas[0]: {`{"id":"ab1","n":3,"x":1.5,"e":1.5,"c":2,"f":"x@example.com","t":null,"s":"éé"}`, `{"id":"zz","n":-2,"e":{"k":1},"s":"abc"}`},
	quickSchemas[1]: {`["head",{"q":1,"z":"s"},{"q":2}]`, `["head"]`},
	quickSchemas[3]: {`{"a1":1,"xb":0}`, `{"ab":2}`},
	quickSchemas[4]: {`{"v":1,"kids":[{"v":2,"kids":[]},{"kids":[{"v":3}]}]}`},
	quickSchemas[5]: {`{"big":9007199254740993,"neg":-1.5}`},
}

// mutate replaces one number, string or literal of a JSON text with a
// random scalar.
func mutate(r *rand.Rand, doc string) string {
	var spans [][2]int
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; {
		case c == '"':
			j := strings.IndexByte(doc[i+1:], '"') + i + 1
			if j+1 < len(doc) && doc[j+1] == ':' { // a key: leave it
				i = j
				continue
			}
			spans, i = append(spans, [2]int{i, j + 1}), j
		case c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n':
			j := i
			for j < len(doc) && !strings.ContainsRune(",]}", rune(doc[j])) {
				j++
			}
			spans, i = append(spans, [2]int{i, j}), j-1
		}
	}
	if len(spans) == 0 {
		return doc
	}
	sp := spans[r.IntN(len(spans))]
	return doc[:sp[0]] + randomValue(r, 4) + doc[sp[1]:]
}

func compileForTest(t testing.TB, doc string) *jsonschema.Schema {
	t.Helper()
	sch, err := compilePart(PartBody, []byte(doc), AnyShared)
	if err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	return sch
}

// The quick check never accepts a value the validator refuses, and it
// accepts most of those the validator accepts (else it only costs time).
func TestQuickNeverAcceptsWhatTheValidatorRefuses(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, doc := range quickSchemas {
		sch := compileForTest(t, doc)
		q := quickOf(sch)
		if q == nil {
			if strings.Contains(doc, "not_a_keyword") {
				continue // unknown keywords are annotations: still quick
			}
			t.Fatalf("no quick check for %s", doc)
		}
		var valid, quick int
		seeds := quickSeeds[doc]
		for i := range 20000 {
			body := randomValue(r, 0)
			if len(seeds) > 0 && i%2 == 0 {
				body = mutate(r, seeds[r.IntN(len(seeds))])
			}
			v, err := decodeStrict([]byte(body))
			if err != nil {
				continue
			}
			libValid := sch.Validate(v) == nil
			if q.check(v, len(body)) {
				quick++
				if !libValid {
					t.Fatalf("schema %s: the quick check accepted %s, which the validator refuses", doc, body)
				}
			}
			if libValid {
				valid++
			}
		}
		if valid > 0 && quick*2 < valid && doc != "false" {
			t.Errorf("schema %s: the quick check accepted only %d of %d valid values", doc, quick, valid)
		}
	}
}

// Schemas with keywords the check does not know get no quick check, and
// a schema that refers to itself without descending is left to the
// validator.
func TestQuickLeavesTheRestToTheValidator(t *testing.T) {
	for _, doc := range []string{
		`{"oneOf":[{"type":"string"},{"type":"integer"}]}`,
		`{"not":{"type":"string"}}`,
		`{"if":{"type":"string"},"then":{"maxLength":1}}`,
		`{"type":"array","uniqueItems":true}`,
		`{"type":"array","contains":{"const":1}}`,
		`{"unevaluatedProperties":false,"allOf":[{"properties":{"a":true}}]}`,
		`{"propertyNames":{"maxLength":2}}`,
		`{"dependentRequired":{"a":["b"]}}`,
		`{"properties":{"deep":{"not":{}}}}`,
		`{"$schema":"http://json-schema.org/draft-07/schema#","items":{"type":"string"}}`,
		`{"$ref":"https://json-schema.org/draft/2020-12/schema"}`,
		`{"format":"regex"}`,
	} {
		if q := quickOf(compileForTest(t, doc)); q != nil {
			t.Errorf("a quick check for %s", doc)
		}
	}
	// Branches that lead back to the same value are a cycle, not work:
	// a flat body gets its answer at once (the validator's, after).
	for _, doc := range []string{`{"anyOf":[{"$ref":"#"},{"$ref":"#"},{"$ref":"#"},{"type":"string"}]}`,
		`{"additionalProperties":{"anyOf":[{"$ref":"#"},{"$ref":"#"},{"$ref":"#"},{"type":"string"}]}}`} {
		sch := compileForTest(t, doc)
		q := quickOf(sch)
		start := time.Now()
		for _, body := range []string{`5`, `{"a":1,"b":2,"c":3}`} {
			v, _ := decodeStrict([]byte(body))
			if q != nil && q.check(v, len(body)) && sch.Validate(v) != nil {
				t.Fatalf("%s: quick accepted %s", doc, body)
			}
		}
		if d := time.Since(start); d > 2*time.Second { // microseconds; the step budget is what bounds it
			t.Errorf("%s: the quick check took %v", doc, d)
		}
	}
	loop := compileForTest(t, `{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`)
	if q := quickOf(loop); q != nil && q.check(map[string]any{}, 2) {
		t.Error("a $ref cycle was accepted by the quick check")
	}
}

// FuzzQuick: for any body, the quick check's "valid" is the validator's.
func FuzzQuick(f *testing.F) {
	for _, s := range []string{`{"id":"ab","n":1}`, `[{"q":1}]`, `{"id":"ab","n":1.0,"x":1}`, `["head",{"q":2,"z":"s"}]`, `{"a1":1,"b":0}`} {
		f.Add(s)
	}
	var schs []*jsonschema.Schema
	var qs []*quickNode
	for _, doc := range quickSchemas {
		sch := compileForTest(f, doc)
		schs, qs = append(schs, sch), append(qs, quickOf(sch))
	}
	f.Fuzz(func(t *testing.T, body string) {
		v, err := decodeStrict([]byte(body))
		if err != nil {
			return
		}
		for i, q := range qs {
			if q != nil && q.check(v, len(body)) && schs[i].Validate(v) != nil {
				var b bytes.Buffer
				_ = json.Compact(&b, []byte(quickSchemas[i]))
				t.Fatalf("schema %s: quick accepted %s", b.String(), body)
			}
		}
	})
}
