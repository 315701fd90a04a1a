package registry_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/idemflow/idemflow/internal/problem"
	"github.com/idemflow/idemflow/internal/registry"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
)

// Every business rejection code the source can answer is listed for the
// metrics to export at 0 (idemflow_business_rejections_total had no series
// until the first rejection) and is described at GET /problems/{code} (an
// unknown slug is a 404 there). The codes are read from the source, so a
// new one that is left out fails here.
func TestEveryRejectionCodeIsListedAndDescribed(t *testing.T) {
	literal := regexp.MustCompile(`RejectedError\{\s*Code:\s*"([a-z0-9-]+)"`)
	found := map[string]string{}
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "../.." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range literal.FindAllStringSubmatch(string(b), -1) {
			found[m[1]] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) < 5 {
		t.Fatalf("found only %v: the scan is broken", found)
	}
	set, err := registry.New()
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, codes := range set.Rejections() {
		for _, c := range codes {
			listed[c] = true
		}
	}
	for code, path := range found {
		if !listed[code] {
			t.Errorf("%s answers rejection %q, which Set.Rejections does not list", path, code)
		}
	}
	for code := range listed {
		_, common := problem.Describe(problem.TypeRejectedPrefix + code)
		if _, declared := set.Description(code); !common && !declared {
			t.Errorf("rejection %q has no description at GET /problems/%s", code, code)
		}
	}
	if !slices.Contains(set.Rejections()["order.create"], "out-of-stock") {
		t.Errorf("order.create: %v", set.Rejections()["order.create"])
	}
}

type noteRequest struct {
	Text string `json:"text"`
}

// A program built for a team's operation shows that operation in dev's
// banner: its declared example comes before idemflow's own (the tickets',
// which always won).
func TestATeamsExampleComesBeforeTheBuiltIns(t *testing.T) {
	note := op.Define(op.Spec[noteRequest, noteRequest]{
		Name:        "team_note",
		Description: "Write a note once.",
		Step: func(context.Context, pgx.Tx, op.In[noteRequest]) (noteRequest, error) {
			return noteRequest{}, nil
		},
		Lookup: func(context.Context, op.Querier, string, string) (noteRequest, bool, error) {
			return noteRequest{}, false, nil
		},
		View:       func(r noteRequest) op.Answer { return op.Answer{Status: 201, Body: r} },
		Table:      "team_note",
		Migrations: fstest.MapFS{"001_team_note.sql": {Data: []byte(`CREATE TABLE team_note (tenant_id text, idem_key text, UNIQUE (tenant_id, idem_key));`)}},
		Example:    `{"text":"hello"}`,
	})
	set, err := registry.New(note)
	if err != nil {
		t.Fatal(err)
	}
	if route, body, ok := set.Example(); !ok || route != "/v1/team_note" || body != `{"text":"hello"}` {
		t.Fatalf("Example() = %s %s %v, want the team's operation's", route, body, ok)
	}
	builtins, err := registry.New()
	if err != nil {
		t.Fatal(err)
	}
	if route, _, ok := builtins.Example(); !ok || route != "/v1/tickets" {
		t.Fatalf("the built-ins' example: %s %v", route, ok)
	}
}
