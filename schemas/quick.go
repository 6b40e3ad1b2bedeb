package schemas

import (
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The quick check: a request that passes it passes the schema, without
// the validator's walk (which parses every number it checks into a
// big.Rat and allocates its state per value: most of a validated call's
// cost). It is built from the compiled schema and knows the keywords most
// request schemas use — type, enum, const, format, $ref, allOf, anyOf,
// properties, patternProperties, additionalProperties, required, min/max
// properties, prefixItems, items, min/max items, min/max length,
// pattern, and the numeric bounds — with the validator's own semantics.
// It can only say "valid": any other answer, and any schema with another
// keyword, sends the request to the validator, which decides and lists
// the problems. So a request is never accepted that the validator would
// refuse (TestQuickNeverAcceptsWhatTheValidatorRefuses checks it).

// quickNode is one compiled schema as the quick check reads it.
type quickNode struct {
	known      bool  // every keyword of the schema is one the check knows
	boolSchema *bool // a true or false schema
	types      uint8 // allowed types (typeBits); 0: any
	consts     []any // const, or enum's values: one must equal the value
	hasConsts  bool
	format     func(any) error
	ref        *quickNode
	allOf      []*quickNode
	anyOf      []*quickNode

	minProps, maxProps int // -1: none
	required           []string
	props              map[string]*quickNode
	patternProps       []quickPattern
	additional         *quickNode // nil: any
	noAdditional       bool

	minItems, maxItems int // -1: none
	prefix             []*quickNode
	items              *quickNode

	minLen, maxLen int // -1: none
	pattern        jsonschema.Regexp

	min, max, exMin, exMax, multipleOf *big.Rat
}

type quickPattern struct {
	re   jsonschema.Regexp
	node *quickNode
}

// The JSON types, as bits.
const (
	tNull uint8 = 1 << iota
	tBool
	tNumber
	tInteger
	tString
	tArray
	tObject
)

var typeNames = map[string]uint8{"null": tNull, "boolean": tBool, "number": tNumber, "integer": tInteger,
	"string": tString, "array": tArray, "object": tObject}

// quickOf builds the quick check of a compiled schema; nil when some
// schema it reaches uses a keyword the check does not know (the check
// would then only waste time before the validator).
func quickOf(s *jsonschema.Schema) *quickNode {
	memo := map[*jsonschema.Schema]*quickNode{}
	root := buildQuick(s, memo)
	for _, n := range memo {
		if !n.known {
			return nil
		}
	}
	return root
}

func buildQuick(s *jsonschema.Schema, memo map[*jsonschema.Schema]*quickNode) *quickNode {
	if n := memo[s]; n != nil {
		return n
	}
	n := &quickNode{minProps: -1, maxProps: -1, minItems: -1, maxItems: -1, minLen: -1, maxLen: -1}
	memo[s] = n // before the children: a $ref may lead back here
	if s.Bool != nil {
		n.known, n.boolSchema = true, s.Bool
		return n
	}
	n.known = s.DraftVersion == 2020 &&
		s.RecursiveRef == nil && s.DynamicRef == nil && s.Not == nil && s.OneOf == nil &&
		s.If == nil && s.Then == nil && s.Else == nil &&
		s.PropertyNames == nil && s.Dependencies == nil && s.DependentRequired == nil && s.DependentSchemas == nil &&
		s.UnevaluatedProperties == nil && s.UnevaluatedItems == nil &&
		!s.UniqueItems && s.Contains == nil && s.MinContains == nil && s.MaxContains == nil &&
		s.Items == nil && s.AdditionalItems == nil &&
		s.ContentEncoding == nil && s.ContentMediaType == nil && s.ContentSchema == nil &&
		len(s.Extensions) == 0 && (s.Format == nil || s.Format.Name != "regex")
	if !n.known {
		return n
	}
	if s.Types != nil {
		for _, t := range s.Types.ToStrings() {
			n.types |= typeNames[t]
		}
	}
	if s.Const != nil {
		n.consts, n.hasConsts = []any{*s.Const}, true
	}
	if s.Enum != nil {
		if n.hasConsts {
			n.known = false // both: rare, leave it to the validator
			return n
		}
		n.consts, n.hasConsts = s.Enum.Values, true
	}
	if s.Format != nil {
		n.format = s.Format.Validate
	}
	if s.Ref != nil {
		n.ref = buildQuick(s.Ref, memo)
	}
	for _, sub := range s.AllOf {
		n.allOf = append(n.allOf, buildQuick(sub, memo))
	}
	for _, sub := range s.AnyOf {
		n.anyOf = append(n.anyOf, buildQuick(sub, memo))
	}
	n.minProps, n.maxProps = intOr(s.MinProperties), intOr(s.MaxProperties)
	n.required = s.Required
	if len(s.Properties) > 0 {
		n.props = make(map[string]*quickNode, len(s.Properties))
		for name, sub := range s.Properties {
			n.props[name] = buildQuick(sub, memo)
		}
	}
	for re, sub := range s.PatternProperties {
		n.patternProps = append(n.patternProps, quickPattern{re, buildQuick(sub, memo)})
	}
	switch a := s.AdditionalProperties.(type) {
	case bool:
		n.noAdditional = !a
	case *jsonschema.Schema:
		n.additional = buildQuick(a, memo)
	}
	n.minItems, n.maxItems = intOr(s.MinItems), intOr(s.MaxItems)
	for _, sub := range s.PrefixItems {
		n.prefix = append(n.prefix, buildQuick(sub, memo))
	}
	if s.Items2020 != nil {
		n.items = buildQuick(s.Items2020, memo)
	}
	n.minLen, n.maxLen, n.pattern = intOr(s.MinLength), intOr(s.MaxLength), s.Pattern
	n.min, n.max, n.exMin, n.exMax, n.multipleOf = s.Minimum, s.Maximum, s.ExclusiveMinimum, s.ExclusiveMaximum, s.MultipleOf
	return n
}

func intOr(p *int) int {
	if p == nil {
		return -1
	}
	return *p
}

// quickRun is one check's state: the nodes applied to the value at hand
// (a node met twice on one value is a cycle: the validator reports it),
// and the steps left. A check that runs out of steps — a schema whose
// branches multiply — leaves the value to the validator.
type quickRun struct {
	stack []*quickNode // the nodes being applied; those of the value at hand from base on
	base  int
	steps int
}

// quickSteps bounds the nodes one check visits: enough for a few per
// value of any body (size is the body's length), far fewer than a
// branching schema could make it try.
func quickSteps(size int) int { return 1<<12 + 8*size }

// check reports whether v, of a body of size bytes, surely passes the
// schema; false means "not sure": ask the validator.
func (n *quickNode) check(v any, size int) bool {
	run := quickRun{stack: make([]*quickNode, 0, 16), steps: quickSteps(size)}
	return n.valid(v, &run)
}

// valid is check within a run.
func (n *quickNode) valid(v any, run *quickRun) bool {
	if !n.known || run.steps <= 0 || slices.Contains(run.stack[run.base:], n) {
		return false
	}
	run.steps--
	run.stack = append(run.stack, n)
	ok := n.validHere(v, run)
	run.stack = run.stack[:len(run.stack)-1]
	return ok
}

// child checks a value inside v: a new value, so no node has been applied
// to it yet.
func (n *quickNode) child(v any, run *quickRun) bool {
	saved := run.base
	run.base = len(run.stack)
	ok := n.valid(v, run)
	run.base = saved
	return ok
}

func (n *quickNode) validHere(v any, run *quickRun) bool {
	if n.boolSchema != nil {
		return *n.boolSchema
	}
	if n.ref != nil && !n.ref.valid(v, run) {
		return false
	}
	t := typeBits(v)
	if t == 0 {
		return false
	}
	if n.types != 0 && n.types&t == 0 {
		return false
	}
	if n.hasConsts {
		found := false
		for _, c := range n.consts {
			if eq, ok := quickEqual(v, c); !ok {
				return false
			} else if eq {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if n.format != nil && n.format(v) != nil {
		return false
	}
	for _, sub := range n.allOf {
		if !sub.valid(v, run) {
			return false
		}
	}
	if len(n.anyOf) > 0 {
		any := false
		for _, sub := range n.anyOf {
			if sub.valid(v, run) {
				any = true
				break
			}
		}
		if !any {
			return false
		}
	}
	switch v := v.(type) {
	case map[string]any:
		return n.validObject(v, run)
	case []any:
		return n.validArray(v, run)
	case string:
		if n.minLen >= 0 || n.maxLen >= 0 {
			l := utf8.RuneCountInString(v)
			if (n.minLen >= 0 && l < n.minLen) || (n.maxLen >= 0 && l > n.maxLen) {
				return false
			}
		}
		return n.pattern == nil || n.pattern.MatchString(v)
	case int64, json.Number:
		return n.validNumber(v)
	}
	return true
}

func (n *quickNode) validObject(obj map[string]any, run *quickRun) bool {
	if (n.minProps >= 0 && len(obj) < n.minProps) || (n.maxProps >= 0 && len(obj) > n.maxProps) {
		return false
	}
	for _, r := range n.required {
		if _, ok := obj[r]; !ok {
			return false
		}
	}
	for name, val := range obj {
		evaluated := false
		if sub, ok := n.props[name]; ok {
			evaluated = true
			if !sub.child(val, run) {
				return false
			}
		}
		for _, p := range n.patternProps {
			if p.re.MatchString(name) {
				evaluated = true
				if !p.node.child(val, run) {
					return false
				}
			}
		}
		if !evaluated {
			if n.noAdditional {
				return false
			}
			if n.additional != nil && !n.additional.child(val, run) {
				return false
			}
		}
	}
	return true
}

func (n *quickNode) validArray(arr []any, run *quickRun) bool {
	if (n.minItems >= 0 && len(arr) < n.minItems) || (n.maxItems >= 0 && len(arr) > n.maxItems) {
		return false
	}
	for i, item := range arr {
		sub := n.items
		if i < len(n.prefix) {
			sub = n.prefix[i]
		}
		if sub != nil && !sub.child(item, run) {
			return false
		}
	}
	return true
}

func (n *quickNode) validNumber(v any) bool {
	if n.min == nil && n.max == nil && n.exMin == nil && n.exMax == nil && n.multipleOf == nil {
		return true
	}
	i, isInt := v.(int64)
	var r *big.Rat
	rat := func() *big.Rat {
		if r == nil {
			if isInt {
				r = new(big.Rat).SetInt64(i)
			} else {
				r, _ = new(big.Rat).SetString(string(v.(json.Number)))
			}
		}
		return r
	}
	cmp := func(bound *big.Rat) int {
		if isInt && bound.IsInt() && bound.Num().IsInt64() {
			b := bound.Num().Int64()
			switch {
			case i < b:
				return -1
			case i > b:
				return 1
			}
			return 0
		}
		if rat() == nil {
			return 2 // unreadable: never "sure"
		}
		return rat().Cmp(bound)
	}
	if n.min != nil {
		if c := cmp(n.min); c < 0 || c == 2 {
			return false
		}
	}
	if n.max != nil && cmp(n.max) > 0 {
		return false
	}
	if n.exMin != nil {
		if c := cmp(n.exMin); c <= 0 || c == 2 {
			return false
		}
	}
	if n.exMax != nil && cmp(n.exMax) >= 0 {
		return false
	}
	if n.multipleOf != nil {
		if rat() == nil || !new(big.Rat).Quo(rat(), n.multipleOf).IsInt() {
			return false
		}
	}
	return true
}

// typeBits is the JSON type of a decoded value (decodeStrict's, or a
// schema's own const and enum values); 0 for anything else.
func typeBits(v any) uint8 {
	switch v := v.(type) {
	case nil:
		return tNull
	case bool:
		return tBool
	case string:
		return tString
	case []any:
		return tArray
	case map[string]any:
		return tObject
	case int64:
		return tNumber | tInteger
	case json.Number:
		if r, ok := new(big.Rat).SetString(string(v)); ok && r.IsInt() {
			return tNumber | tInteger
		}
		return tNumber
	}
	return 0
}

// quickEqual is the validator's equality of JSON values (numbers by
// value: 1, 1.0 and 1e0 are equal); ok false for a value it cannot
// compare.
func quickEqual(a, b any) (eq, ok bool) {
	switch a := a.(type) {
	case nil:
		return b == nil, true
	case bool:
		bb, isBool := b.(bool)
		return isBool && a == bb, true
	case string:
		bs, isStr := b.(string)
		return isStr && a == bs, true
	case int64, json.Number:
		switch b.(type) {
		case int64, json.Number:
		default:
			return false, true
		}
		if ai, aok := a.(int64); aok {
			if bi, bok := b.(int64); bok {
				return ai == bi, true
			}
		}
		ra, aok := new(big.Rat).SetString(fmt.Sprint(a))
		rb, bok := new(big.Rat).SetString(fmt.Sprint(b))
		if !aok || !bok {
			return false, false
		}
		return ra.Cmp(rb) == 0, true
	case []any:
		bs, isArr := b.([]any)
		if !isArr {
			return false, true
		}
		if len(a) != len(bs) {
			return false, true
		}
		for i := range a {
			if eq, ok := quickEqual(a[i], bs[i]); !ok || !eq {
				return eq, ok
			}
		}
		return true, true
	case map[string]any:
		bm, isObj := b.(map[string]any)
		if !isObj {
			return false, true
		}
		if len(a) != len(bm) {
			return false, true
		}
		for k, av := range a {
			bv, found := bm[k]
			if !found {
				return false, true
			}
			if eq, ok := quickEqual(av, bv); !ok || !eq {
				return eq, ok
			}
		}
		return true, true
	}
	return false, false
}
