// Package docs reads the project's documentation, README.md and the
// topic documents in docs/, for the tests that hold it to the code: a
// section moved between files stays under test.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Files are the documentation's files under the repository's root: the
// README first, then docs/*.md by name.
func Files(root string) ([]string, error) {
	topics, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, fmt.Errorf("docs: %w", err)
	}
	if len(topics) == 0 {
		return nil, fmt.Errorf("docs: no docs/*.md under %s", root)
	}
	sort.Strings(topics)
	return append([]string{filepath.Join(root, "README.md")}, topics...), nil
}

// Read returns every documentation file under root, one after another,
// each ending in a blank line.
func Read(root string) (string, error) {
	files, err := Files(root)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("docs: %w", err)
		}
		b.Write(text)
		b.WriteString("\n\n")
	}
	return b.String(), nil
}
