package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/jetway-gw/jetway/registry"
)

// printInForce prints what every node serves for an API (stdout) and, on
// stderr, that a newer revision is invalid and why it is not served.
func printInForce(stdout, stderr io.Writer, f registry.InForce) {
	if f.API != nil {
		printJSON(stdout, f.Entry.Value)
	} else {
		printJSON(stdout, f.Newest.Value)
	}
	if f.Newest == nil {
		return
	}
	if f.API != nil {
		fmt.Fprintf(stderr, "in force: revision %d; the newest, revision %d, is invalid and not served:\n", f.Entry.Revision, f.Newest.Revision)
	} else {
		fmt.Fprintf(stderr, "not served: revision %d is invalid and no earlier valid revision is in force:\n", f.Newest.Revision)
	}
	printProblems(stderr, f.NewestErr)
}

func printProblems(w io.Writer, err error) {
	if ve, ok := err.(*registry.ValidationError); ok {
		for _, p := range ve.Problems {
			fmt.Fprintln(w, "  "+p.String())
		}
		return
	}
	fmt.Fprintf(w, "  %v\n", err)
}

// printAPIList prints one row per API with the revision in force.
func printAPIList(w, stderr io.Writer, fs []registry.InForce) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPOOL\tROUTE\tBACKEND\tREVISION\tNOTE")
	for _, f := range fs {
		if f.Newest != nil && f.Newest.Err != nil {
			fmt.Fprintf(tw, "%s\t-\t(invalid key: not served)\t-\t-\t\n", f.Newest.Name)
			fmt.Fprintf(stderr, "jetway: warning: %v\n", f.Newest.Err)
			continue
		}
		if f.API == nil {
			fmt.Fprintf(tw, "%s\t-\t(invalid entry: not served)\t-\t%d\tsee jetway api get %s\n", f.Newest.Name, f.Newest.Revision, f.Newest.Name)
			continue
		}
		a := f.API
		target := a.Backend.Type
		if a.Backend.URL != "" {
			target += " " + a.Backend.URL
		}
		if a.HasChannels() {
			names := make([]string, len(a.Channels))
			for i, c := range a.Channels {
				names[i] = c.Name
			}
			target = "channels " + strings.Join(names, ",")
		}
		note := ""
		if f.Newest != nil {
			note = fmt.Sprintf("newer revision %d is invalid, not served", f.Newest.Revision)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s\t%d\t%s\n", a.Name, a.Pool, a.Route.Method, a.Route.Path, target, f.Entry.Revision, note)
	}
	return tw.Flush()
}

// printHistory prints every kept revision with its size, a digest to tell
// values apart, and which fields it changed from the value before it.
func printHistory(w io.Writer, hs []registry.Entry) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REVISION\tOP\tCREATED\tVALID\tSIZE\tDIGEST\tCHANGED")
	var prev []byte
	for _, h := range hs {
		if h.Op != "PUT" {
			fmt.Fprintf(tw, "%d\t%s\t%s\t-\t-\t-\t(deleted)\n", h.Revision, h.Op, h.Created)
			prev = nil
			continue
		}
		valid := "yes"
		if _, err := registry.ParseAPI(h.Name, h.Value); err != nil {
			valid = "no"
		}
		sum := sha256.Sum256(h.Value)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", h.Revision, h.Op, h.Created, valid, len(h.Value), hex.EncodeToString(sum[:6]), changedFields(prev, h.Value))
		prev = h.Value
	}
	return tw.Flush()
}

// changedFields names the fields (two levels deep: "backend.url") whose
// values differ between two JSON objects; "(created)" when there is no
// previous value.
func changedFields(prev, cur []byte) string {
	if prev == nil {
		return "(created)"
	}
	var changed []string
	diffObjects("", prev, cur, 2, &changed)
	if len(changed) == 0 {
		return "(same value)"
	}
	return strings.Join(changed, ", ")
}

func diffObjects(prefix string, a, b []byte, depth int, out *[]string) {
	var ma, mb map[string]json.RawMessage
	if depth == 0 || json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
		if !jsonEqual(a, b) {
			name := strings.TrimSuffix(prefix, ".")
			if name == "" {
				name = "(whole value)" // not JSON objects
			}
			*out = append(*out, name)
		}
		return
	}
	keys := make([]string, 0, len(ma)+len(mb))
	for k := range ma {
		keys = append(keys, k)
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		va, oka := ma[k]
		vb, okb := mb[k]
		switch {
		case !oka || !okb:
			*out = append(*out, prefix+k)
		case !jsonEqual(va, vb):
			diffObjects(prefix+k+".", va, vb, depth-1, out)
		}
	}
}

func jsonEqual(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// printDiff prints what changed between two kept revisions of an API,
// one line per field (a JSON pointer): "-" removed, "+" added, "~" changed
// with the old and new values. revs are the revisions asked for: none —
// the value before the newest and the newest; one — it and the newest;
// two — those. A deletion in between is no value: compare values only.
func printDiff(w io.Writer, hs []registry.Entry, revs []uint64) error {
	var puts []registry.Entry
	byRev := map[uint64]registry.Entry{}
	for _, h := range hs {
		byRev[h.Revision] = h
		if h.Op == "PUT" {
			puts = append(puts, h)
		}
	}
	pick := func(rev uint64) (registry.Entry, error) {
		h, ok := byRev[rev]
		switch {
		case !ok:
			return h, fmt.Errorf("revision %d is not kept for this api (jetway api history lists those that are)", rev)
		case h.Op != "PUT":
			return h, fmt.Errorf("revision %d is a deletion, not a value", rev)
		}
		return h, nil
	}
	var from, to registry.Entry
	var err error
	switch len(revs) {
	case 0:
		if len(puts) < 2 {
			return fmt.Errorf("the api has %d kept value(s): nothing to compare", len(puts))
		}
		from, to = puts[len(puts)-2], puts[len(puts)-1]
	case 1:
		if len(puts) == 0 {
			return fmt.Errorf("the api has no kept value")
		}
		if from, err = pick(revs[0]); err != nil {
			return err
		}
		to = puts[len(puts)-1]
	default:
		if from, err = pick(revs[0]); err != nil {
			return err
		}
		if to, err = pick(revs[1]); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "--- revision %d (%s)\n+++ revision %d (%s)\n", from.Revision, from.Created, to.Revision, to.Created)
	a, b := map[string]string{}, map[string]string{}
	if err := flattenJSON("", from.Value, a); err != nil {
		return fmt.Errorf("revision %d: %w", from.Revision, err)
	}
	if err := flattenJSON("", to.Value, b); err != nil {
		return fmt.Errorf("revision %d: %w", to.Revision, err)
	}
	keys := slices.Sorted(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	n := 0
	for _, k := range keys {
		if k == "/created_revision" {
			continue // the registry's own bookkeeping (when the API was first made), not the publisher's
		}
		va, oka := a[k]
		vb, okb := b[k]
		switch {
		case !okb:
			fmt.Fprintf(w, "- %s: %s\n", k, va)
		case !oka:
			fmt.Fprintf(w, "+ %s: %s\n", k, vb)
		case va != vb:
			fmt.Fprintf(w, "~ %s: %s -> %s\n", k, va, vb)
		default:
			continue
		}
		n++
	}
	if n == 0 {
		fmt.Fprintln(w, "(the same value)")
	}
	return nil
}

// flattenJSON puts every leaf of a JSON document into out, by JSON pointer,
// as compact JSON: objects and arrays open up, an empty one is a leaf.
func flattenJSON(prefix string, doc []byte, out map[string]string) error {
	var v any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	var walk func(p string, v any)
	walk = func(p string, v any) {
		switch x := v.(type) {
		case map[string]any:
			if len(x) > 0 {
				for k, e := range x {
					walk(p+"/"+strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1"), e)
				}
				return
			}
		case []any:
			if len(x) > 0 {
				for i, e := range x {
					walk(p+"/"+strconv.Itoa(i), e)
				}
				return
			}
		}
		b, _ := json.Marshal(v)
		if p == "" {
			p = "/"
		}
		out[p] = string(b)
	}
	walk(prefix, v)
	return nil
}
