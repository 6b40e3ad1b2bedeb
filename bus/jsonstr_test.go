package bus

import (
	"bytes"
	"encoding/json"
	"testing"
)

// encodingJSON is s as encoding/json quotes it, with or without its HTML
// escaping.
func encodingJSON(t *testing.T, s string, escapeHTML bool) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(escapeHTML)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func checkJSONString(t *testing.T, s string) {
	t.Helper()
	for _, html := range []bool{true, false} {
		if got, want := AppendJSONString([]byte("x"), s, html), append([]byte("x"), encodingJSON(t, s, html)...); !bytes.Equal(got, want) {
			t.Fatalf("AppendJSONString(%q, html %v) = %s, encoding/json %s", s, html, got, want)
		}
	}
}

func TestAppendJSONStringIsEncodingJSONs(t *testing.T) {
	for _, s := range []string{
		"", "plain", `q"b\c`, "<a href='x'>&amp;</a>", "\x00\x01\x1f\x7f\b\f\n\r\t",
		"é 😀 \u2028\u2029 \ufffd", "\xff\xfe bad \xe2\x82", "end\xe2",
	} {
		checkJSONString(t, s)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	f.Add("<&>\u2028\xff\x00\"\\")
	f.Fuzz(func(t *testing.T, s string) { checkJSONString(t, s) })
}
