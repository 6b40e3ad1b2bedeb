package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdLink matches a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocLinks keeps the docs' relative links working: every link in a
// Markdown file of the repository, outside code blocks, to another file
// names one that exists, and a link to a heading (file.md#anchor, or
// #anchor in the same file) names a heading that is there.
func TestDocLinks(t *testing.T) {
	root := ".."
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found only %v", files)
	}
	anchors := map[string]map[string]bool{} // file -> heading slugs
	slugs := func(file string) map[string]bool {
		if a, ok := anchors[file]; ok {
			return a
		}
		a := map[string]bool{}
		b, err := os.ReadFile(file)
		if err == nil {
			for _, l := range outsideCode(string(b)) {
				if h, ok := strings.CutPrefix(l, "#"); ok {
					a[slug(strings.TrimLeft(h, "#"))] = true
				}
			}
		}
		anchors[file] = a
		return a
	}
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range outsideCode(string(b)) {
			for _, m := range mdLink.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				file := f
				if path != "" {
					file = filepath.Join(filepath.Dir(f), path)
					if _, err := os.Stat(file); err != nil {
						t.Errorf("%s: link to %s: no such file", f, target)
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(file, ".md") && !slugs(file)[anchor] {
					t.Errorf("%s: link to %s: no such heading in %s", f, target, file)
				}
				checked++
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d links", checked)
	}
}

// outsideCode returns the lines of a Markdown text that are not inside a
// fenced code block.
func outsideCode(s string) []string {
	var out []string
	fenced := false
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, l)
		}
	}
	return out
}

// slug is a heading's anchor as GitHub makes it: lower case, punctuation
// dropped but for '-' and '_', spaces become '-'.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}
