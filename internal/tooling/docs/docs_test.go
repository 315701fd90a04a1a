package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every topic document links to the README and to every other one (the
// navigation line under its title), and every link to a document points
// at a file that exists: a reader moves between them by links, not by
// names written out as text.
func TestEveryDocumentLinksToTheOthers(t *testing.T) {
	files, err := Files("../../..")
	if err != nil {
		t.Fatal(err)
	}
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
			if other != f && !linked[filepath.Clean(other)] {
				t.Errorf("%s does not link to %s", filepath.Base(f), strings.TrimPrefix(other, "../../../"))
			}
		}
	}
}
