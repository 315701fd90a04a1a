// Package python holds idemflow's Python client (src/idemflow), its
// framework integrations, and the test that runs its pytest
// suite against the real stack: the client's own tests, the LangGraph
// agent SIGKILLed at four points and resumed, a Temporal agent's worker
// SIGKILLed inside a tool activity, and the official MCP SDK over stdio
// and streamable HTTP. scripts/test.sh installs the locked packages into
// .venv first (python3 -m venv; pip install --require-hashes).
package python

import (
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemflow/idemflow/httptool"
	"github.com/idemflow/idemflow/idemflowtest/downstream"
	"github.com/idemflow/idemflow/internal/mcpserver"
	"github.com/idemflow/idemflow/internal/tooling/oauthtest"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// venv is the Python of one of the package's virtual environments (.venv,
// or .venv-crewai for CrewAI, which cannot share it), with the locked
// packages installed.
func venv(t *testing.T, dir, lock string) string {
	t.Helper()
	py, err := filepath.Abs(filepath.Join(dir, "bin", "python"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("the Python package is not installed in %[1]s: run scripts/test.sh, or in clients/python: python3 -m venv %[1]s && "+
			"%[1]s/bin/pip install --require-hashes --no-deps -r %[2]s && %[1]s/bin/pip install --no-deps --no-build-isolation -e .", dir, lock)
	}
	return py
}

// mcpStack starts the stack with the tests' HTTP tools (refund_queued,
// whose service answers 202, and slow_refund, whose service takes 4 s)
// and idemflow's MCP server over streamable HTTP in front of it, and
// returns the environment a suite needs to reach them: the gateway, the
// tenants' tokens, the MCP server's URL, bin/idemflow (for idemflow mcp
// over stdio, which serves the same tools from IDEMFLOW_TOOLS) and the
// database.
func mcpStack(t *testing.T) (*testenv.Stack, []string) {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin", "idemflow"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatal("bin/idemflow is not built (the MCP test runs it over stdio): run scripts/test.sh, or go build -o bin/idemflow ./cmd/idemflow")
	}
	queued := downstream.New()
	queued.Accepted = true
	srv := httptest.NewServer(queued.Handler())
	t.Cleanup(srv.Close)
	// slow_refund's service takes 4 s over each refund: a call that
	// outlasts an MCP client's wait (tests/test_mcp.py).
	slow := downstream.New()
	slow.Late = 4 * time.Second
	for range 20 {
		slow.Inject(downstream.Slow)
	}
	slowSrv := httptest.NewServer(slow.Handler())
	t.Cleanup(slowSrv.Close)
	toolsYAML := []byte(fmt.Sprintf(`tools:
  - name: refund_queued
    description: Refund part of a payment.
    input_schema: {type: object, required: [payment_id, amount_cents], properties: {payment_id: {type: string}, amount_cents: {type: integer}}}
    call: {method: POST, url: %q, key_header: Idempotency-Key}
  - name: slow_refund
    description: Refund part of a payment, slowly.
    input_schema: {type: object, required: [payment_id, amount_cents], properties: {payment_id: {type: string}, amount_cents: {type: integer}}}
    call: {method: POST, url: %q, key_header: Idempotency-Key}`, srv.URL+"/keyed/refunds", slowSrv.URL+"/keyed/refunds"))
	tools, err := httptool.Parse(toolsYAML, nil)
	if err != nil {
		t.Fatal(err)
	}
	// idemflow mcp over stdio serves them too (IDEMFLOW_TOOLS).
	toolsFile := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(toolsFile, toolsYAML, 0o600); err != nil {
		t.Fatal(err)
	}
	s := testenv.NewStack(t, testenv.Options{Tools: tools})
	mcp := httptest.NewServer(mcpserver.HTTPHandler(mcpserver.Config{BaseURL: s.URL, CallTimeout: 30 * time.Second, Operations: s.Set.Operations()}, mcpserver.HTTPOptions{}))
	t.Cleanup(mcp.Close)
	return s, []string{
		"IDEMFLOW_URL=" + s.URL,
		"IDEMFLOW_TOKEN=" + s.Tokens[testenv.TenantA],
		"IDEMFLOW_TOKEN_B=" + s.Tokens[testenv.TenantB],
		"IDEMFLOW_MCP_URL=" + mcp.URL + "/",
		"IDEMFLOW_BIN=" + bin,
		"IDEMFLOW_TOOLS=" + toolsFile,
		"DATABASE_URL=" + s.DatabaseURL,
	}
}

// The package's pytest suite against the stack (see the package comment).
//
// Its HTTP tools answer as downstreams do: refund_queued's with a 202 (the
// refund queued), and with a 422 above the captured amount.
func TestThePythonPackageAgainstTheStack(t *testing.T) {
	py := venv(t, ".venv", "requirements.lock")
	s, environ := mcpStack(t)

	// -s: the kill tests print their counts.
	args := []string{"-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "tests"}
	if run := os.Getenv("IDEMFLOW_PYTEST_K"); run != "" {
		args = append(args, "-k", run)
	}
	cmd := exec.Command(py, args...)
	cmd.Env = append(append(os.Environ(), environ...),
		"TEMPORAL_ADDRESS="+s.Server.GetFrontendHostPort(),
		"TEMPORAL_NAMESPACE="+s.Server.GetDefaultNamespace(),
		"PYTHONUNBUFFERED=1",
	)
	out, err := cmd.CombinedOutput()
	t.Log(string(out))
	if err != nil {
		t.Fatalf("pytest: %v", err)
	}
}

// CrewAI's tests (tests/crewai) in their own environment, against the
// stack: a flow SIGKILLed mid call and kicked off again, its controls, the
// same through idemflow mcp, the mcp 1.x SDK's task client, and the shared
// key vectors. The main suite leaves tests/crewai to this test
// (tests/conftest.py), which fails where the environment is missing.
func TestCrewAIAgainstTheStack(t *testing.T) {
	ownSuite(t, "crewai",
		// No network: CrewAI's telemetry and tracing stay off.
		"CREWAI_DISABLE_TELEMETRY=true", "CREWAI_TRACING_ENABLED=false", "OTEL_SDK_DISABLED=true")
}

// Strands Agents' tests (tests/strands) in their own environment, against
// the stack: an agent on a FileSessionManager SIGKILLed mid call and sent
// its message again, its controls, two calls in a turn, a pending answer
// written again, the docs' program, and the shared key vectors. The main
// suite leaves tests/strands to this test (tests/conftest.py), which fails
// where the environment is missing.
func TestStrandsAgainstTheStack(t *testing.T) {
	// No network: Strands' telemetry stays off.
	ownSuite(t, "strands", "OTEL_SDK_DISABLED=true")
}

// ownSuite runs tests/<name> in .venv-<name> (from requirements-<name>.lock)
// against the stack, with env added to the environment.
func ownSuite(t *testing.T, name string, env ...string) {
	py := venv(t, ".venv-"+name, "requirements-"+name+".lock")
	_, environ := mcpStack(t)
	args := []string{"-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "tests/" + name}
	if run := os.Getenv("IDEMFLOW_PYTEST_K"); run != "" {
		args = append(args, "-k", run)
	}
	cmd := exec.Command(py, args...)
	cmd.Env = append(append(append(os.Environ(), environ...), "IDEMFLOW_PYTEST_SUITE="+name, "PYTHONUNBUFFERED=1"), env...)
	out, err := cmd.CombinedOutput()
	t.Log(string(out))
	if err != nil {
		t.Fatalf("pytest tests/%s: %v", name, err)
	}
}

// The official MCP Python SDK's OAuth client, and idemflow's clients with
// a token provider, against a real authorization server (tests/oauth, in
// the main environment): a host goes from a 401 through discovery,
// registration, PKCE, login and consent and the resource indicator to one
// ticket and keeps working on a refreshed token; a service agent's
// client credentials are renewed by its provider.
func TestOAuthWithThePythonSDKAndClient(t *testing.T) {
	py := venv(t, ".venv", "requirements.lock")
	o := oauthtest.New(t, 4*time.Second, "http://127.0.0.1:9/callback")
	cmd := exec.Command(py, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "tests/oauth")
	cmd.Env = append(append(os.Environ(), o.Env...), "IDEMFLOW_PYTEST_SUITE=oauth", "PYTHONUNBUFFERED=1")
	out, err := cmd.CombinedOutput()
	t.Log(string(out))
	if err != nil {
		t.Fatalf("pytest tests/oauth: %v", err)
	}
}
