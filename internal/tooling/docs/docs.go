// Package docs reads the project's documentation, README.md, the topic
// documents in docs/ and the agent pages in docs/agents/, for the tests that hold it to the code: a
// section moved between files stays under test.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Files are the documentation's files under the repository's root: the
// README first, then docs/*.md by name, then the pages under docs/agents/
// in the order docs/agents.md links them (the first makes the Python
// environment the others install into), any it does not link last.
func Files(root string) ([]string, error) {
	topics, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, fmt.Errorf("docs: %w", err)
	}
	if len(topics) == 0 {
		return nil, fmt.Errorf("docs: no docs/*.md under %s", root)
	}
	sort.Strings(topics)
	pages, err := AgentPages(root)
	if err != nil {
		return nil, err
	}
	return append(append([]string{filepath.Join(root, "README.md")}, topics...), pages...), nil
}

// agentPage is a link from docs/agents.md to one of its pages.
var agentPage = regexp.MustCompile(`\]\(agents/([a-z0-9-]+\.md)\)`)

// AgentPages are the pages under docs/agents/, in the order docs/agents.md
// links them, then the ones it does not link, by name.
func AgentPages(root string) ([]string, error) {
	all, err := filepath.Glob(filepath.Join(root, "docs", "agents", "*.md"))
	if err != nil {
		return nil, fmt.Errorf("docs: %w", err)
	}
	sort.Strings(all)
	index, err := os.ReadFile(filepath.Join(root, "docs", "agents.md"))
	if err != nil && len(all) > 0 {
		return nil, fmt.Errorf("docs: %w", err)
	}
	var pages []string
	for _, m := range agentPage.FindAllStringSubmatch(string(index), -1) {
		p := filepath.Join(root, "docs", "agents", m[1])
		if slices.Contains(all, p) && !slices.Contains(pages, p) {
			pages = append(pages, p)
		}
	}
	for _, p := range all {
		if !slices.Contains(pages, p) {
			pages = append(pages, p)
		}
	}
	return pages, nil
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
