package docs

import (
	"fmt"
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
// exists and holds the test NAME; "<!-- abridged: FILE -->", every line
// of the block without a "…" being FILE's, in FILE's order (FILE is one
// the tests build); or, in the text a reader sees, "_Not run: WHY_". A
// block added without one fails here, as do a marker naming a test that
// is gone, an abridgement its file no longer has, and a reason hidden in
// an HTML comment (issue #57: a reader never saw it).
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
			case kind == "abridged":
				if err := abridgedFrom(b.Text, filepath.Join(root, rest)); err != nil {
					t.Errorf("%s: %v", where, err)
				}
				counts["abridged from a built file"]++
			case kind == "not run":
				if len(rest) < 12 {
					t.Errorf("%s: a block no test runs says why; %q does not", where, rest)
				}
				counts["not run, saying why"]++
			case kind == "fragment":
				t.Errorf("%s: the reason is in an HTML comment, which a reader never sees: write it as the line _Not run: WHY_", where)
			default:
				t.Errorf("%s: a %q block with no marker: put <!-- run: FILE TEST -->, <!-- abridged: FILE --> or _Not run: WHY_ on the line before it", where, b.Lang)
			}
		}
	}
	t.Logf("code blocks: %v", counts)
}

// abridgedFrom says whether block is cut from file: each of its lines
// without a "…", its code with a trailing comment dropped and its spaces
// collapsed, is one of file's, in file's order.
func abridgedFrom(block, file string) error {
	src, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("abridged from a file that is not there: %w", err)
	}
	var have []string
	for l := range strings.Lines(string(src)) {
		have = append(have, codeOf(l))
	}
	i := 0
	for l := range strings.Lines(block) {
		want := codeOf(l)
		if want == "" || strings.Contains(l, "…") {
			continue
		}
		for i < len(have) && have[i] != want {
			i++
		}
		if i == len(have) {
			return fmt.Errorf("%q is not a line of %s after the ones before it", want, strings.TrimPrefix(file, root+"/"))
		}
		i++
	}
	return nil
}

// codeOf is a Go line without its trailing comment, its spaces
// collapsed. A directive (//go:embed) is code.
func codeOf(line string) string {
	l := strings.TrimSpace(line)
	if !strings.HasPrefix(l, "//go:") {
		l = l[:commentAt(l)]
	}
	return strings.Join(strings.Fields(l), " ")
}

// commentAt is where l's trailing comment starts (a "//" outside a
// string), or len(l).
func commentAt(l string) int {
	var quote rune
	for i, r := range l {
		switch {
		case quote != 0 && r == quote && (quote == '`' || l[i-1] != '\\'):
			quote = 0
		case quote == 0 && (r == '"' || r == '`'):
			quote = r
		case quote == 0 && strings.HasPrefix(l[i:], "//"):
			return i
		}
	}
	return len(l)
}
