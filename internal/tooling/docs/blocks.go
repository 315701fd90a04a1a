package docs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// A Block is one fenced code block of a document.
type Block struct {
	File string // as given to Blocks
	Line int    // the opening fence's, from 1
	Lang string // the fence's info string ("" for none)
	// Marker is what the nearest non-blank line before the fence says of
	// the block ("" for none). An HTML comment's inside, trimmed: "run:
	// FILE NAME" names the test that runs the block as written,
	// "abridged: FILE" the file it is cut from. A line of text in italics,
	// "_Not run: WHY_", which a reader sees, gives "not run: WHY".
	Marker string
	Text   string
}

var (
	marker = regexp.MustCompile(`^<!--\s*(.*?)\s*-->$`)
	notRun = regexp.MustCompile(`^_Not run: (.+)_$`)
)

// Blocks returns the fenced code blocks of file.
func Blocks(file string) ([]Block, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("docs: %w", err)
	}
	defer f.Close()
	var blocks []Block
	var cur *Block
	var text strings.Builder
	lastNonBlank := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		fence := strings.HasPrefix(strings.TrimSpace(l), "```")
		switch {
		case cur == nil && fence:
			cur = &Block{File: file, Line: n, Lang: strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "```"))}
			if m := marker.FindStringSubmatch(strings.TrimSpace(lastNonBlank)); m != nil {
				cur.Marker = m[1]
			} else if m := notRun.FindStringSubmatch(strings.TrimSpace(lastNonBlank)); m != nil {
				cur.Marker = "not run: " + m[1]
			}
			text.Reset()
		case cur != nil && fence:
			cur.Text = text.String()
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			text.WriteString(l + "\n")
		}
		if strings.TrimSpace(l) != "" {
			lastNonBlank = l
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("docs: %s: %w", file, err)
	}
	if cur != nil {
		return nil, fmt.Errorf("docs: %s:%d: a code block is never closed", file, cur.Line)
	}
	return blocks, nil
}

// WithBlocks are the files whose code blocks are held to running: the
// documentation (Files) and the clients' READMEs.
func WithBlocks(root string) ([]string, error) {
	files, err := Files(root)
	if err != nil {
		return nil, err
	}
	return append(files, filepath.Join(root, "clients", "python", "README.md"), filepath.Join(root, "clients", "typescript", "README.md")), nil
}
