package activities_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/internal/metrics"
)

// activities.Verdicts lists every Verdict constant the package declares
// (read from its source, so a verdict added without listing it fails
// here), and the metrics export each of them at 0 before it happens:
// alerts need the series before the first event.
func TestVerdictsListsEveryVerdictAndTheMetricsExportEach(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Verdict" {
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok {
						declared = append(declared, strings.Trim(lit.Value, `"`))
					}
				}
			}
			return true
		})
	}
	if len(declared) == 0 {
		t.Fatal("found no Verdict constants: the test reads the wrong thing")
	}
	var listed []string
	for _, v := range activities.Verdicts() {
		listed = append(listed, string(v))
	}
	slices.Sort(declared)
	slices.Sort(listed)
	if !slices.Equal(declared, listed) {
		t.Fatalf("declared verdicts %v, activities.Verdicts %v", declared, listed)
	}

	reg := metrics.New()
	defer reg.Close()
	for _, v := range activities.Verdicts() {
		reg.Worker.ExportVerdict(string(v))
	}
	rec := httptest.NewRecorder()
	reg.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	page, _ := io.ReadAll(rec.Body)
	for _, v := range declared {
		if !strings.Contains(string(page), `idemflow_reconcile_intents_total{verdict="`+v+`"} 0`) {
			t.Errorf("verdict %q is not exported at 0", v)
		}
	}
}
