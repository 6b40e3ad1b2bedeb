package bus

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// errorsDoc is the callers' reference of the error codes.
const errorsDoc = "../docs/errors.md"

// docRow matches a row of the code table in docs/errors.md:
// | `CODE` | status[, text] | when |
var docRow = regexp.MustCompile("^\\| `([A-Z_]+)` \\| ([0-9]{3})\\b[^|]*\\|")

// TestErrorsDocMatchesCodes keeps docs/errors.md true to this package: every
// Code constant declared in errors.go has a status in codeStatus and one row
// in the doc with that status, and the doc names no code or status the code
// does not have. A new code, a changed status or a removed code fails here
// until the doc says so too.
func TestErrorsDocMatchesCodes(t *testing.T) {
	declared := declaredCodes(t)
	if len(declared) == 0 {
		t.Fatal("found no Code constants in errors.go")
	}
	for _, c := range declared {
		if _, ok := codeStatus[c]; !ok {
			t.Errorf("code %s is declared but has no status in codeStatus", c)
		}
	}
	if len(codeStatus) != len(declared) {
		t.Errorf("codeStatus has %d codes, errors.go declares %d", len(codeStatus), len(declared))
	}

	doc := documentedCodes(t)
	for c, want := range codeStatus {
		got, ok := doc[c]
		if !ok {
			t.Errorf("%s: code %s (status %d) is missing", errorsDoc, c, want)
			continue
		}
		if got != want {
			t.Errorf("%s: code %s has status %d, the code says %d", errorsDoc, c, got, want)
		}
	}
	for c := range doc {
		if _, ok := codeStatus[c]; !ok {
			t.Errorf("%s: names code %s, which bus does not have", errorsDoc, c)
		}
	}
}

// declaredCodes returns the values of the constants of type Code in errors.go.
func declaredCodes(t *testing.T) []Code {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []Code
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("errors.go: a Code constant is not a string literal: %T", v)
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				codes = append(codes, Code(s))
			}
		}
	}
	return codes
}

// documentedCodes returns each code of the table in docs/errors.md with its
// status (the first number of the status column: "503, or the switch's
// status" is 503).
func documentedCodes(t *testing.T) map[Code]int {
	t.Helper()
	b, err := os.ReadFile(errorsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := map[Code]int{}
	for i, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		m := docRow.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("%s:%d: a table row that is not | `CODE` | status | when |: %s", errorsDoc, i+1, line)
			continue
		}
		c := Code(m[1])
		if _, dup := doc[c]; dup {
			t.Errorf("%s:%d: code %s is listed twice", errorsDoc, i+1, c)
		}
		doc[c], _ = strconv.Atoi(m[2])
	}
	return doc
}
