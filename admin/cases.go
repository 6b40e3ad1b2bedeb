package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/jetway-gw/jetway/registry"
)

// CaseResult is how one saved case went: no problems when it passed,
// else every way the answer differed from what it must be.
type CaseResult struct {
	Name     string   `json:"name"`
	Problems []string `json:"problems,omitempty"`
}

// RunCases sends an API's saved cases to an edge (base, such as
// http://127.0.0.1:8080) with the app's key when given (a sandbox app's
// key tests the sandbox tier), each within timeout, and compares the
// answers.
func RunCases(ctx context.Context, client *http.Client, base, key string, cases []registry.Case) []CaseResult {
	out := make([]CaseResult, 0, len(cases))
	for _, c := range cases {
		problems, _ := runCase(ctx, client, base, key, c)
		out = append(out, CaseResult{Name: c.Name, Problems: problems})
	}
	return out
}

// draftWait bounds how long RunDraftCases waits for the edge to serve the
// draft revision it tests (an edge applies a change within milliseconds).
const draftWait = 3 * time.Second

// RunDraftCases is RunCases for a draft at revision rev, sent with a
// sandbox app's key: every answer must come from that revision (the
// edge's X-Jetway-Draft), so a pass is a pass of what promote copies. The
// first case is sent again, for up to draftWait, while the edge does not
// serve that revision yet, or no worker does (NO_WORKERS).
func RunDraftCases(ctx context.Context, client *http.Client, base, key string, cases []registry.Case, rev uint64) []CaseResult {
	want := strconv.FormatUint(rev, 10)
	out := make([]CaseResult, 0, len(cases))
	give := time.Now().Add(draftWait)
	for i, c := range cases {
		for {
			problems, served := runCase(ctx, client, base, key, c)
			// Not yet applied everywhere: the edge serves an older
			// revision, or no worker serves the draft yet.
			early := served != want || len(problems) > 0 && strings.Contains(problems[0], `"code":"NO_WORKERS"`)
			if early && i == 0 && time.Now().Before(give) && ctx.Err() == nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			if served != want {
				problems = append(problems, fmt.Sprintf("answered by draft revision %q, not %s (is the key a sandbox app's, and does the edge serve the draft?)", served, want))
			}
			out = append(out, CaseResult{Name: c.Name, Problems: problems})
			break
		}
	}
	return out
}

// runCase sends one case and returns how its answer differs from what it
// must be, and the draft revision that answered ("": none).
func runCase(ctx context.Context, client *http.Client, base, key string, c registry.Case) (problems []string, served string) {
	method := c.Request.Method
	if method == "" {
		method = http.MethodGet
	}
	var body io.Reader
	contentType := ""
	if len(c.Request.Body) > 0 {
		var text string
		if json.Unmarshal(c.Request.Body, &text) == nil {
			body, contentType = strings.NewReader(text), "text/plain; charset=utf-8"
		} else {
			body, contentType = bytes.NewReader(c.Request.Body), "application/json"
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(base, "/")+c.Request.Path, body)
	if err != nil {
		return []string{"the request cannot be made: " + err.Error()}, ""
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	for k, v := range c.Request.Headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return []string{"no answer: " + err.Error()}, ""
	}
	defer func() { _ = resp.Body.Close() }()
	served = resp.Header.Get("X-Jetway-Draft")
	got, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return []string{"the answer could not be read: " + err.Error()}, served
	}
	if resp.StatusCode != c.Expect.Status {
		problems = append(problems, fmt.Sprintf("status %d, want %d (%.200s)", resp.StatusCode, c.Expect.Status, got))
	}
	for k, want := range c.Expect.Headers {
		if v := resp.Header.Get(k); v != want {
			problems = append(problems, fmt.Sprintf("header %s %q, want %q", k, v, want))
		}
	}
	if len(c.Expect.Body) > 0 {
		var doc any
		dec := json.NewDecoder(bytes.NewReader(got))
		dec.UseNumber()
		if err := dec.Decode(&doc); err != nil {
			return append(problems, "the body is not JSON: "+err.Error()), served
		}
		for ptr, want := range c.Expect.Body {
			v, ok := pointerGet(doc, ptr)
			if !ok {
				problems = append(problems, fmt.Sprintf("body %s: missing, want %s", ptr, want))
				continue
			}
			if g, w := canonicalJSON(v), canonicalRaw(want); g != w {
				problems = append(problems, fmt.Sprintf("body %s: %s, want %s", ptr, g, w))
			}
		}
	}
	return problems, served
}

// pointerGet follows a JSON pointer (RFC 6901) into a decoded document.
func pointerGet(doc any, ptr string) (any, bool) {
	if ptr == "" {
		return doc, true
	}
	cur := doc
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

func canonicalJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func canonicalRaw(raw json.RawMessage) string {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return string(raw)
	}
	return canonicalJSON(v)
}

// testAPI runs an API's saved cases through this node's edge (POST
// /v1/apis/{name}/test, {"key": "<an app's API key>"} — a sandbox app's
// tests the sandbox tier; the key is used for the calls and kept nowhere).
func (s *Server) testAPI(w http.ResponseWriter, r *http.Request) {
	if s.o.EdgeURL == "" {
		writeError(w, http.StatusConflict, "NO_EDGE", "this admin API has no edge to test through (jetway admin --edge)")
		return
	}
	doc, ok := readBody(w, r)
	if !ok {
		return
	}
	var in struct {
		Key   string `json:"key"`
		Draft bool   `json:"draft"`
	}
	if len(bytes.TrimSpace(doc)) > 0 {
		if err := json.Unmarshal(doc, &in); err != nil {
			writeError(w, http.StatusBadRequest, "BAD_REQUEST", `the body is {"key": "<an app's API key>", "draft": false} or empty`)
			return
		}
	}
	key := chi.URLParam(r, "name")
	if in.Draft {
		key = registry.DraftKey(key)
	}
	onDraft := strings.HasPrefix(key, registry.DraftPrefix) // also /v1/apis/draft.x/test
	f, err := s.c.GetInForce(r.Context(), key)
	if err != nil {
		writeRegistryError(w, err, s.log)
		return
	}
	if f.API == nil || len(f.API.Cases) == 0 {
		writeError(w, http.StatusConflict, "NO_CASES", "the api in force has no saved cases (the entry's cases)")
		return
	}
	client := &http.Client{Timeout: 5 * time.Second}
	var results []CaseResult
	if onDraft {
		results = RunDraftCases(r.Context(), client, s.o.EdgeURL, in.Key, f.API.Cases, f.Entry.Revision)
	} else {
		results = RunCases(r.Context(), client, s.o.EdgeURL, in.Key, f.API.Cases)
	}
	failed := 0
	for _, res := range results {
		if len(res.Problems) > 0 {
			failed++
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"api": f.API.Name, "revision": f.Entry.Revision,
		"passed": len(results) - failed, "failed": failed, "items": results})
}
