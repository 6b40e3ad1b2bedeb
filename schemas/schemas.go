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

// DegradeSchemaJSON is the JSON Schema of a degrade switch.
//
//go:embed degrade.schema.json
var DegradeSchemaJSON []byte

// FaultSchemaJSON is the JSON Schema of a fault injection switch.
//
//go:embed fault.schema.json
var FaultSchemaJSON []byte

// TopicSchemaJSON is the JSON Schema of a push topic.
//
//go:embed topic.schema.json
var TopicSchemaJSON []byte

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

// schema is one embedded schema, compiled on first use.
type schema struct {
	name string
	doc  []byte
	once sync.Once
	sch  *jsonschema.Schema
	err  error
}

func (s *schema) compiled() (*jsonschema.Schema, error) {
	s.once.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(s.doc))
		if err != nil {
			s.err = fmt.Errorf("parsing embedded schema %s: %w", s.name, err)
			return
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource(s.name, doc); err != nil {
			s.err = fmt.Errorf("adding schema %s: %w", s.name, err)
			return
		}
		s.sch, s.err = c.Compile(s.name)
	})
	return s.sch, s.err
}

var (
	apiSchema     = &schema{name: "api.schema.json", doc: APISchemaJSON}
	degradeSchema = &schema{name: "degrade.schema.json", doc: DegradeSchemaJSON}
	faultSchema   = &schema{name: "fault.schema.json", doc: FaultSchemaJSON}
	topicSchema   = &schema{name: "topic.schema.json", doc: TopicSchemaJSON}
)

// ValidateAPI checks a JSON document (raw bytes) against the API schema.
// See validate.
func ValidateAPI(doc []byte) []Problem { return validate(apiSchema, doc) }

// ValidateFault checks a JSON document against the fault switch schema.
func ValidateFault(doc []byte) []Problem { return validate(faultSchema, doc) }

// ValidateTopic checks a JSON document against the topic schema.
func ValidateTopic(doc []byte) []Problem { return validate(topicSchema, doc) }

// ValidateDegrade checks a JSON document against the degrade switch schema.
func ValidateDegrade(doc []byte) []Problem { return validate(degradeSchema, doc) }

// validate checks a JSON document (raw bytes) against a schema and returns
// every problem found, sorted by path; none means it conforms. A document
// that is not JSON at all yields one problem at path "".
func validate(s *schema, doc []byte) []Problem {
	sch, err := s.compiled()
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
