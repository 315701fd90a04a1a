package agentclient_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/internal/tooling/docs"
)

// docs/agents.md's Go client block is the calls in an agent's code, not a
// program: it is compiled (go vet) as written, inside a function that
// gives it what the agent has (ctx, url, token, toolCallID, the bodies), so
// that a renamed method or error, or a changed signature, fails here.
func TestTheDocumentedCallsCompileInContext(t *testing.T) {
	blocks, err := docs.Blocks("../docs/agents/go.md")
	if err != nil {
		t.Fatal(err)
	}
	var code string
	for _, b := range blocks {
		if strings.Contains(b.Marker, "TestTheDocumentedCallsCompileInContext") {
			code = b.Text
		}
	}
	if code == "" {
		t.Fatal("docs/agents/go.md has no Go block this test compiles")
	}
	const imp = `import "github.com/idemflow/idemflow/agentclient"` + "\n"
	if !strings.HasPrefix(code, imp) {
		t.Fatalf("the block no longer begins with %q", imp)
	}
	src := `package snippet

import (
	"context"
	"errors"

	"github.com/idemflow/idemflow/agentclient"
)

func agent(ctx context.Context, url, token, toolCallID string, body, fixedBody any) (agentclient.Result, agentclient.Intent, error) {
` + strings.TrimPrefix(code, imp) + `	return res, in, err
}
`
	// Inside the module, so that its imports resolve; '_' keeps it out
	// of ./... for everyone else.
	dir, err := os.MkdirTemp(".", "_docsnippet")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "snippet.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "vet", "./"+filepath.Base(dir)).CombinedOutput()
	if err != nil {
		t.Fatalf("docs/agents/go.md's Go block does not compile in context: %v\n%s\n%s", err, out, src)
	}
}
