package demo_test

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/demo"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

func TestDemoShowsZeroDuplicatesForIdemflowAndSomeForTheNaiveClient(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	var out bytes.Buffer
	good, naive, err := demo.Run(context.Background(), demo.Config{
		BaseURL: s.URL, Token: s.Tokens[testenv.TenantA], Tenant: testenv.TenantA, DatabaseURL: s.DatabaseURL,
		UIURL: "http://127.0.0.1:8233", Intents: 10, DropRate: 0.5, DelayRate: 0.1,
		AttemptTimeout: time.Second, Seed: 42, StoreDir: t.TempDir(), Out: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if good.Succeeded != 10 || good.Rows != 10 || good.Duplicates != 0 {
		t.Fatalf("idemflow client: %+v", good)
	}
	if good.Lost+good.Late == 0 || good.Attempts <= 10 {
		t.Fatalf("the network dropped nothing, so the run proves nothing: %+v", good)
	}
	if naive.Duplicates == 0 {
		t.Fatalf("naive client made no duplicates: %+v", naive)
	}
	for _, want := range []string{"DUPLICATES", "Temporal Web UI", "StartTime"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, out.String())
		}
	}
	// docs/setup.md shows a run's report: its table has this report's
	// rows, in this order (its numbers are another run's).
	doc, err := os.ReadFile("../../../docs/setup.md")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tableRows(string(doc)), tableRows(out.String()); !slices.Equal(got, want) {
		t.Fatalf("docs/setup.md's sample report has the rows %q, the demo prints %q", got, want)
	}
}

// tableRows are the labels of a demo report's table rows: every line
// indented by two spaces whose label is followed by a count.
func tableRows(text string) []string {
	var rows []string
	for _, m := range regexp.MustCompile(`(?m)^  (\S[^\n]*?)\s{2,}(\d[^\n]*)$`).FindAllStringSubmatch(text, -1) {
		rows = append(rows, m[1])
	}
	return rows
}
