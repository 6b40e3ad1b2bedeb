package edge

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jetway-gw/jetway/bus"
	"github.com/jetway-gw/jetway/expr"
	"github.com/jetway-gw/jetway/registry"
	"github.com/jetway-gw/jetway/schemas"
)

// rewriter is an API tier's rewrites (registry.Rewrite), compiled once
// per registry change: header names canonical, pointers split, values
// parsed.
type rewriter struct {
	broken      bool // it did not compile: every call is refused
	pathRe      *regexp.Regexp
	pathRepl    string
	pathTmpl    []tmplPart // a path template, when the path rewrite is one
	host        string
	reqWhen     *expr.Cond
	respWhen    *expr.Cond
	method      string
	reqHeaders  *headerOps
	queryRemove []string
	querySet    [][2]string // name, value; sorted by name
	queryAdd    [][2]string // name, value; sorted by name
	reqBody     *bodyOps
	status      map[int]int
	respHeaders *headerOps
	respBody    *bodyOps
}

// tmplPart is a literal of a path template, or a route parameter.
type tmplPart struct {
	lit, param string
}

// compileTemplate splits a path template (checked at publish) into its
// literals and parameters.
func compileTemplate(t string) []tmplPart {
	var parts []tmplPart
	for t != "" {
		i := strings.IndexByte(t, '{')
		j := strings.IndexByte(t, '}')
		if i < 0 || j < i {
			parts = append(parts, tmplPart{lit: t})
			break
		}
		if i > 0 {
			parts = append(parts, tmplPart{lit: t[:i]})
		}
		parts = append(parts, tmplPart{param: t[i+1 : j]})
		t = t[j+1:]
	}
	return parts
}

// expandTemplate is a path template with the call's route parameters,
// as the canonical path has them.
func expandTemplate(parts []tmplPart, r *http.Request) string {
	var b strings.Builder
	for _, p := range parts {
		if p.param == "" {
			b.WriteString(p.lit)
			continue
		}
		for k, v := range routeParams(r) {
			if k == p.param {
				b.WriteString(v)
				break
			}
		}
	}
	return b.String()
}

type headerOps struct {
	remove   []string
	set, add [][2]string
}

// bodyOps are JSON pointer changes, as token paths.
type bodyOps struct {
	remove [][]string
	rename [][2][]string
	set    []bodySet
}

type bodySet struct {
	path []string
	val  any // copied before it goes into a body: bodies never share it
}

// compileRewrite compiles a tier's rewrites; one that does not compile (a
// set value the strict parser refuses) makes every call of the tier fail
// closed rather than go on unrewritten.
func (e *Edge) compileRewrite(key string, r *registry.Rewrite) *rewriter {
	rw, err := newRewriter(r)
	if err != nil {
		e.log.Error("rewrite does not compile; the api refuses every call until it does", "api", key, "err", err)
		return &rewriter{broken: true}
	}
	return rw
}

func newRewriter(r *registry.Rewrite) (*rewriter, error) {
	if r == nil {
		return nil, nil
	}
	rw := &rewriter{}
	if q := r.Request; q != nil {
		if q.When != "" {
			c, err := expr.Compile(q.When)
			if err != nil {
				return nil, fmt.Errorf("request.when: %w", err)
			}
			rw.reqWhen = c
		}
		if p := q.Path; p != nil && p.Template != "" {
			rw.pathTmpl = compileTemplate(p.Template)
		} else if p != nil {
			re, err := regexp.Compile(p.Regex)
			if err != nil {
				return nil, fmt.Errorf("request.path: %w", err)
			}
			rw.pathRe, rw.pathRepl = re, p.Replace
		}
		rw.method, rw.host = q.Method, q.Host
		rw.reqHeaders = compileHeaders(q.Headers)
		if qr := q.Query; qr != nil {
			rw.queryRemove = slices.Clone(qr.Remove)
			for k, v := range qr.Set {
				rw.querySet = append(rw.querySet, [2]string{k, v})
			}
			for k, v := range qr.Add {
				rw.queryAdd = append(rw.queryAdd, [2]string{k, v})
			}
			slices.SortFunc(rw.querySet, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
			slices.SortFunc(rw.queryAdd, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
		}
		var err error
		if rw.reqBody, err = compileBody(q.Body); err != nil {
			return nil, err
		}
	}
	if s := r.Response; s != nil {
		if s.When != "" {
			c, err := expr.Compile(s.When)
			if err != nil {
				return nil, fmt.Errorf("response.when: %w", err)
			}
			rw.respWhen = c
		}
		if len(s.Status) > 0 {
			rw.status = make(map[int]int, len(s.Status))
			for from, to := range s.Status {
				n, _ := strconv.Atoi(from) // checked at publish
				rw.status[n] = to
			}
		}
		rw.respHeaders = compileHeaders(s.Headers)
		var err error
		if rw.respBody, err = compileBody(s.Body); err != nil {
			return nil, err
		}
	}
	return rw, nil
}

func compileHeaders(h *registry.HeaderRewrite) *headerOps {
	if h == nil {
		return nil
	}
	ops := &headerOps{}
	for _, k := range h.Remove {
		ops.remove = append(ops.remove, http.CanonicalHeaderKey(k))
	}
	for k, v := range h.Set {
		ops.set = append(ops.set, [2]string{http.CanonicalHeaderKey(k), v})
	}
	for k, v := range h.Add {
		ops.add = append(ops.add, [2]string{http.CanonicalHeaderKey(k), v})
	}
	slices.SortFunc(ops.set, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	slices.SortFunc(ops.add, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	return ops
}

func (ops *headerOps) apply(h http.Header) {
	if ops == nil {
		return
	}
	for _, k := range ops.remove {
		delete(h, k)
	}
	for _, kv := range ops.set {
		h[kv[0]] = []string{kv[1]}
	}
	for _, kv := range ops.add {
		h[kv[0]] = append(h[kv[0]], kv[1])
	}
}

func compileBody(b *registry.JSONBodyChange) (*bodyOps, error) {
	if b == nil {
		return nil, nil
	}
	ops := &bodyOps{}
	for _, p := range b.Remove {
		ops.remove = append(ops.remove, splitPointer(p))
	}
	for from, to := range b.Rename {
		ops.rename = append(ops.rename, [2][]string{splitPointer(from), splitPointer(to)})
	}
	for p, raw := range b.Set {
		v, err := schemas.DecodeJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("set %s: %w", p, err)
		}
		ops.set = append(ops.set, bodySet{splitPointer(p), v})
	}
	// A fixed order, whatever the map's: the same entry rewrites the same
	// way on every edge.
	slices.SortFunc(ops.remove, func(a, b []string) int { return slices.Compare(a, b) })
	slices.SortFunc(ops.rename, func(a, b [2][]string) int { return slices.Compare(a[0], b[0]) })
	slices.SortFunc(ops.set, func(a, b bodySet) int { return slices.Compare(a.path, b.path) })
	return ops, nil
}

// splitPointer turns a JSON pointer (RFC 6901) into its tokens.
func splitPointer(p string) []string {
	toks := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks
}

// apply changes a parsed body: removes, renames, sets. An error names a
// set or rename whose way is blocked (a field on the way is not an object
// or an array, or an index is out of range).
func (ops *bodyOps) apply(doc any) (any, error) {
	for _, p := range ops.remove {
		doc = removeAt(doc, p)
	}
	for _, r := range ops.rename {
		v, ok := getAt(doc, r[0])
		if !ok {
			continue
		}
		doc = removeAt(doc, r[0])
		var err error
		if doc, err = setAt(doc, r[1], v); err != nil {
			return nil, err
		}
	}
	for _, s := range ops.set {
		var err error
		if doc, err = setAt(doc, s.path, deepCopy(s.val)); err != nil {
			return nil, err
		}
	}
	return doc, nil
}

func getAt(doc any, path []string) (any, bool) {
	cur := doc
	for _, t := range path {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[t]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, ok := arrayIndex(t)
			if !ok || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// removeAt removes what path names; nothing when it names nothing.
func removeAt(doc any, path []string) any {
	if len(path) == 0 {
		return doc
	}
	parent, ok := getAt(doc, path[:len(path)-1])
	if !ok {
		return doc
	}
	last := path[len(path)-1]
	switch p := parent.(type) {
	case map[string]any:
		delete(p, last)
	case []any:
		if i, ok := arrayIndex(last); ok && i < len(p) {
			np := slices.Delete(p, i, i+1)
			if len(path) == 1 {
				return np
			}
			grand, _ := getAt(doc, path[:len(path)-2])
			switch g := grand.(type) {
			case map[string]any:
				g[path[len(path)-2]] = np
			case []any:
				j, _ := arrayIndex(path[len(path)-2])
				g[j] = np
			}
		}
	}
	return doc
}

// setAt sets what path names to v, making the objects on its way; "-"
// appends to an array.
func setAt(doc any, path []string, v any) (any, error) {
	if len(path) == 0 {
		return v, nil
	}
	if doc == nil {
		doc = map[string]any{}
	}
	switch c := doc.(type) {
	case map[string]any:
		k := path[0]
		if _, exact := c[k]; !exact {
			// A key equal but for case would stay beside the new one, and
			// a Go backend could read either: the new one replaces it.
			for other := range c {
				if strings.EqualFold(other, k) {
					delete(c, other)
				}
			}
		}
		child, err := setAt(c[k], path[1:], v)
		if err != nil {
			return nil, err
		}
		c[k] = child
		return c, nil
	case []any:
		if path[0] == "-" {
			if len(path) > 1 {
				return nil, errors.New("/-: an element to be appended has no fields yet")
			}
			child, err := setAt(nil, path[1:], v)
			if err != nil {
				return nil, err
			}
			return append(c, child), nil
		}
		i, ok := arrayIndex(path[0])
		if !ok || i >= len(c) {
			return nil, fmt.Errorf("/%s is not an index of the array there", path[0])
		}
		child, err := setAt(c[i], path[1:], v)
		if err != nil {
			return nil, err
		}
		c[i] = child
		return c, nil
	}
	return nil, fmt.Errorf("/%s: the value on the way is not an object or an array", path[0])
}

// arrayIndex reads a pointer token as an array index: digits, no sign, no
// leading zero (RFC 6901).
func arrayIndex(t string) (int, bool) {
	if t == "" || len(t) > 9 || (len(t) > 1 && t[0] == '0') {
		return 0, false
	}
	n := 0
	for i := 0; i < len(t); i++ {
		if t[i] < '0' || t[i] > '9' {
			return 0, false
		}
		n = n*10 + int(t[i]-'0')
	}
	return n, true
}

func deepCopy(v any) any {
	switch c := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(c))
		for k, x := range c {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		a := make([]any, len(c))
		for i, x := range c {
			a[i] = deepCopy(x)
		}
		return a
	}
	return v
}

// encodeBody writes a rewritten body: compact, object keys sorted (the
// same body on every edge), numbers exactly as they were written.
func encodeBody(doc any) ([]byte, error) {
	return appendJSON(make([]byte, 0, 1024), doc)
}

func appendJSON(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		return strconv.AppendBool(dst, x), nil
	case string:
		return appendJSONString(dst, x), nil
	case int64:
		return strconv.AppendInt(dst, x, 10), nil
	case json.Number:
		return append(dst, x...), nil
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendJSON(dst, e); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	case map[string]any:
		var buf [16]string
		keys := buf[:0]
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(appendJSONString(dst, k), ':')
			var err error
			if dst, err = appendJSON(dst, x[k]); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	}
	return nil, fmt.Errorf("not a JSON value: %T", v)
}

// appendJSONString quotes a string for JSON (as encoding/json does,
// without its HTML escaping: a rewritten body keeps its < > &).
func appendJSONString(dst []byte, s string) []byte { return bus.AppendJSONString(dst, s, false) }

// rewriteRequest applies the API's request rewrites: method, headers,
// query, then the JSON body (parsed once with validation when both
// apply). A body rewrite of a body that is not JSON is refused: the change
// could matter (a field removed), and the backend might read the body as
// JSON anyway.
func (c *call) rewriteRequest() error {
	rw := c.rt.rewrite
	if rw == nil {
		return nil
	}
	if rw.broken {
		return c.refuse(bus.CodeInternal, "the rewrites of api "+c.rt.api.Name+" are not loaded on this edge")
	}
	r := c.r
	if c.rt.cache != nil {
		c.lastGood = c.lastGoodKey() // a degrade switch looks the answer up by the caller's request
	}
	if rw.reqWhen != nil && !holds(rw.reqWhen, c.condInput(), c.e.log, c.rt.api.Name) {
		return nil
	}
	if rw.pathRe != nil || rw.pathTmpl != nil {
		var p string
		if rw.pathRe != nil {
			p = rw.pathRe.ReplaceAllString(r.URL.RawPath, rw.pathRepl)
		} else {
			p = expandTemplate(rw.pathTmpl, r)
		}
		cp, err := canonicalPath(p)
		if err != nil || cp != p {
			// The captures and parameters come from the caller's
			// canonical path, but a replacement can still make "//" or a
			// dot segment (a parameter that is ".."): refused, as the edge
			// refuses such a path from a caller.
			return c.refuse(bus.CodeBadRequest, "the rewritten path "+strconv.Quote(p)+" is not a canonical path")
		}
		c.callerPath, r.URL.RawPath = r.URL.RawPath, p
	}
	if rw.method != "" {
		r.Method = rw.method
	}
	c.host = rw.host
	rw.reqHeaders.apply(r.Header)
	if len(rw.queryRemove) > 0 || len(rw.querySet) > 0 || len(rw.queryAdd) > 0 {
		r.URL.RawQuery = rewriteQuery(r.URL.RawQuery, rw.queryRemove, rw.querySet, rw.queryAdd)
	}
	if rw.reqBody == nil || c.body == nil || c.body.Len() == 0 {
		return nil
	}
	doc := c.decoded
	if doc == nil {
		if !schemas.IsJSON(r.Header.Get("Content-Type")) {
			return c.refuse(bus.CodeBadRequest, "api "+c.rt.api.Name+" rewrites JSON bodies: send application/json")
		}
		var err error
		if doc, err = schemas.DecodeJSON(c.body.Bytes()); err != nil {
			return c.refuse(bus.CodeBadRequest, "api "+c.rt.api.Name+" rewrites JSON bodies: "+err.Error())
		}
	}
	doc, err := rw.reqBody.apply(doc)
	if err != nil {
		return c.refuse(bus.CodeBadRequest, "rewriting the body: "+err.Error())
	}
	out, err := encodeBody(doc)
	if err != nil {
		return c.refuse(bus.CodeBadRequest, "rewriting the body: "+err.Error())
	}
	if int64(len(out)) > c.rt.maxBody {
		return c.refuse(bus.CodePayloadTooLarge, "the rewritten body exceeds the api's max_body")
	}
	c.body.Reset()
	c.body.Write(out)
	return nil
}

// rewriteQuery removes, sets and adds query parameters in a raw query,
// leaving every other pair as the caller wrote it.
func rewriteQuery(raw string, remove []string, set, add [][2]string) string {
	var out []string
	done := make([]bool, len(set))
	if raw != "" {
		for _, p := range strings.Split(raw, "&") {
			name, _, _ := strings.Cut(p, "=")
			n, err := url.QueryUnescape(name)
			if err != nil {
				n = name
			}
			if slices.Contains(remove, n) {
				continue
			}
			if i, ok := slices.BinarySearchFunc(set, n, func(kv [2]string, n string) int { return strings.Compare(kv[0], n) }); ok {
				if !done[i] { // the first of its name takes the value, the others go
					out = append(out, url.QueryEscape(n)+"="+url.QueryEscape(set[i][1]))
					done[i] = true
				}
				continue
			}
			out = append(out, p)
		}
	}
	for i, kv := range set {
		if !done[i] {
			out = append(out, url.QueryEscape(kv[0])+"="+url.QueryEscape(kv[1]))
		}
	}
	for _, kv := range add {
		out = append(out, url.QueryEscape(kv[0])+"="+url.QueryEscape(kv[1]))
	}
	return strings.Join(out, "&")
}

// rewriteResponse is the call's answer as its API's response rewrites make
// it (see rewriter.response).
func (c *call) rewriteResponse(status int, h http.Header, body []byte) (int, []byte, error) {
	if c.rt.rewrite == nil {
		return status, body, nil
	}
	var in *expr.Input // the condition's, only when there is one: it escapes to the heap
	if c.rt.rewrite.respWhen != nil {
		in = c.condInput()
	}
	return c.rt.rewrite.response(in, status, h, body, c.e.log, c.rt.api.Name)
}

// response applies the response rewrites to a backend's answer before it
// is sent and cached: the status, headers, and a JSON body, for a call
// whose request part of a condition's input is in (nil when the rewrite
// has no response condition). A body the rewrite
// should change but cannot read as JSON (a JSON type that does not parse
// strictly, nested too deep) is an error: the caller then gets 502, never
// the body unchanged, for the removal of a field may be the point. A body
// of another Content-Type passes as it came. A changed body loses its
// Content-Length and the validators that name its bytes (ETag, Digest).
func (rw *rewriter) response(in *expr.Input, status int, h http.Header, body []byte, log *slog.Logger, api string) (int, []byte, error) {
	if rw.respWhen != nil {
		in.Status, in.RespHeader, in.RespBody, in.Decode = status, h, body, schemas.DecodeJSON
		if !holds(rw.respWhen, in, log, api) {
			return status, body, nil
		}
	}
	if to, ok := rw.status[status]; ok {
		status = to
	}
	rw.respHeaders.apply(h)
	if rw.respBody == nil || len(body) == 0 || !schemas.IsJSON(h.Get("Content-Type")) {
		return status, body, nil
	}
	doc, err := schemas.DecodeJSON(body)
	if err == nil {
		doc, err = rw.respBody.apply(doc)
	}
	var out []byte
	if err == nil {
		out, err = encodeBody(doc)
	}
	if err != nil {
		return status, nil, fmt.Errorf("the response body of api %s could not be rewritten: %w", api, err)
	}
	for _, k := range []string{"Content-Length", "Etag", "Content-Md5", "Digest", "Repr-Digest", "Content-Digest"} {
		delete(h, k)
	}
	return status, out, nil
}

// condInput is the request part of a condition's input for the call.
func (c *call) condInput() *expr.Input {
	in := &expr.Input{Method: c.r.Method, Path: c.r.URL.RawPath, Header: c.r.Header, RawQuery: c.r.URL.RawQuery, ClientIP: c.clientIP}
	if c.app != nil {
		in.App, in.Sandbox = c.app.app.ID, c.app.app.Sandbox
	}
	return in
}

// holds evaluates a rewrite's condition (nil: always). A condition that
// fails to run (its cost limit, a key a map lacks) does not hold, and is
// logged.
func holds(cond *expr.Cond, in *expr.Input, log *slog.Logger, api string) bool {
	if cond == nil {
		return true
	}
	ok, err := cond.Eval(in)
	if err != nil {
		log.Debug("rewrite condition failed; the rewrite does not apply", "api", api, "when", cond.String(), "err", err)
		return false
	}
	return ok
}
