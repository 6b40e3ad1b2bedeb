// Package schemas ships the JSON Schemas of Jetway's registry entries and
// validates documents against them. The schema files are the contract: the
// same files serve editors and other tools (see api.schema.json).
package schemas

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// APISchemaJSON is the JSON Schema of an API entry.
//
//go:embed api.schema.json
var APISchemaJSON []byte

// Problem is one reason a document does not conform: the dotted field path
// ("route.path", "" for the document itself) and a message.
type Problem struct {
	Path    string
	Message string
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

var printer = message.NewPrinter(language.English)

var (
	apiOnce   sync.Once
	apiSchema *jsonschema.Schema
	apiErr    error
)

func compiledAPI() (*jsonschema.Schema, error) {
	apiOnce.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(APISchemaJSON))
		if err != nil {
			apiErr = fmt.Errorf("parsing embedded api schema: %w", err)
			return
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource("api.schema.json", doc); err != nil {
			apiErr = fmt.Errorf("adding api schema: %w", err)
			return
		}
		apiSchema, apiErr = c.Compile("api.schema.json")
	})
	return apiSchema, apiErr
}

// ValidateAPI checks a JSON document (raw bytes) against the API schema and
// returns every problem found, sorted by path; none means it conforms.
// A document that is not JSON at all yields one problem at path "".
func ValidateAPI(doc []byte) []Problem {
	sch, err := compiledAPI()
	if err != nil {
		return []Problem{{Message: err.Error()}}
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return []Problem{{Message: "not valid JSON: " + err.Error()}}
	}
	err = sch.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []Problem{{Message: err.Error()}}
	}
	var out []Problem
	seen := map[Problem]bool{}
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		p := Problem{Path: strings.Join(e.InstanceLocation, "."), Message: e.ErrorKind.LocalizedString(printer)}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	walk(ve)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}
