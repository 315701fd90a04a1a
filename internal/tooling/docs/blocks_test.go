package docs

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the repository's, from this package's directory.
const root = "../../.."

// Every code block of the README, docs/ and the clients' READMEs is run
// as written by a test, or says why not. The sh blocks of the README and
// docs/ are run line by line by internal/cli's
// TestEveryReadmeCommandLineRuns; every other block carries a marker on
// the line before it: "<!-- run: FILE NAME -->", FILE a test file that
// exists and holds the test NAME, or "<!-- fragment: WHY -->". A block
// added without one fails here, as does a marker naming a test that is
// gone.
func TestEveryCodeBlockIsRunOrSaysWhyNot(t *testing.T) {
	files, err := WithBlocks(root)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "internal", "cli", "readme_test.go"))
	if err != nil || !strings.Contains(string(readme), "func TestEveryReadmeCommandLineRuns(") {
		t.Fatalf("internal/cli/readme_test.go no longer runs the documents' sh blocks (%v)", err)
	}
	counts := map[string]int{}
	for _, f := range files {
		blocks, err := Blocks(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			where := strings.TrimPrefix(b.File, root+"/") + ":" + strconv.Itoa(b.Line)
			kind, rest, _ := strings.Cut(b.Marker, ":")
			rest = strings.TrimSpace(rest)
			switch {
			case b.Lang == "sh" && slices.Contains(docs, f) && b.Marker == "":
				counts["sh, run by TestEveryReadmeCommandLineRuns"]++
			case kind == "run":
				file, name, _ := strings.Cut(rest, " ")
				name = strings.TrimSpace(name)
				src, err := os.ReadFile(filepath.Join(root, file))
				if err != nil || name == "" || !strings.Contains(string(src), name) {
					t.Errorf("%s: its marker says %q runs it, which is not there (%v)", where, rest, err)
				}
				counts["run by a named test"]++
			case kind == "fragment":
				if len(rest) < 12 {
					t.Errorf("%s: a fragment says why no test runs it; %q does not", where, rest)
				}
				counts["fragments"]++
			default:
				t.Errorf("%s: a %q block with no marker: put <!-- run: FILE TEST --> or <!-- fragment: WHY --> on the line before it", where, b.Lang)
			}
		}
	}
	t.Logf("code blocks: %v", counts)
}
