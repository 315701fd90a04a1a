package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every document links to the README and to every other document beside
// it (the navigation line under its title): the topic documents in docs/
// to each other, the agent pages in docs/agents/ to each other and to
// their index, docs/agents.md, which links every page. Every link to a
// document points at a file that exists: a reader moves between them by
// links, not by names written out as text.
func TestEveryDocumentLinksToTheOthers(t *testing.T) {
	const root = "../../.."
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(root, "docs", "agents.md")
	link := regexp.MustCompile(`\]\(([a-zA-Z0-9./_-]+\.md)(#[a-z0-9-]*)?\)`)
	for _, f := range files[1:] {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		linked := map[string]bool{}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := filepath.Clean(filepath.Join(filepath.Dir(f), m[1]))
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s links to %s, which does not exist", f, m[1])
			}
			linked[target] = true
		}
		for _, other := range files {
			if wantsLink(files[0], index, f, other) && !linked[filepath.Clean(other)] {
				t.Errorf("%s does not link to %s", strings.TrimPrefix(f, root+"/"), strings.TrimPrefix(other, root+"/"))
			}
		}
	}
}

// wantsLink says whether document f must link to other: the README and
// every document beside it; the agents' index every page under it, and
// each page the index.
func wantsLink(readme, index, f, other string) bool {
	page := func(p string) bool { return filepath.Base(filepath.Dir(p)) == "agents" }
	switch {
	case other == f:
		return false
	case other == readme, filepath.Dir(other) == filepath.Dir(f):
		return true
	case f == index:
		return page(other)
	case page(f):
		return other == index
	}
	return false
}
