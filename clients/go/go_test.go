// Package goagents holds the tests of idemflow's integrations with Go's
// agent frameworks, each a module of its own beside this package (adk/:
// Google's Agent Development Kit for Go; genkittool/: Genkit for Go), so
// that a framework's
// dependencies never move idemflow's. The tests build each module's
// programs with the go command and run them against the real stack: an
// agent SIGKILLed with a tool call in flight, then run again its
// framework's way, and the module's own tests (the shared key vectors).
package goagents

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// build compiles the program pkg of the module in dir into a file of t's
// and returns its path.
func build(t *testing.T, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s in %s: %v\n%s", pkg, dir, err, b)
	}
	return out
}

// gemini is a local stand-in for the Gemini API's generateContent
// (GOOGLE_GEMINI_BASE_URL): a scripted model, no network. It asks for
// create_ticket for customer, one call at a time (all at once with
// together), until it has read as many answers (function responses with
// http_status) since the turn's message as it has titles, then says it is
// done. Its calls carry no ID, as Gemini's do not: ADK gives each one of
// its own. After a crash it reads no answer and writes the call again,
// reworded with reword, as a model at its usual temperature does.
type gemini struct {
	customer string
	titles   []string
	together bool
	reword   bool

	mu    sync.Mutex
	calls int
}

func (g *gemini) serve(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, ":generateContent") {
			http.Error(w, "the stand-in answers generateContent alone", http.StatusNotFound)
			return
		}
		var req struct {
			Contents []struct {
				Role  string           `json:"role"`
				Parts []map[string]any `json:"parts"`
			} `json:"contents"`
			Tools []struct {
				FunctionDeclarations []struct {
					Name string `json:"name"`
				} `json:"functionDeclarations"`
			} `json:"tools"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		hasTool := false
		for _, tl := range req.Tools {
			for _, f := range tl.FunctionDeclarations {
				hasTool = hasTool || f.Name == "create_ticket"
			}
		}
		answered, results := 0, 0
	turn:
		for i := len(req.Contents) - 1; i >= 0; i-- {
			c := req.Contents[i]
			if c.Role == "model" {
				continue
			}
			for _, p := range c.Parts {
				if fr, ok := p["functionResponse"]; ok {
					results++
					if raw, _ := json.Marshal(fr); strings.Contains(string(raw), "http_status") {
						answered++
					}
				}
			}
			for _, p := range c.Parts {
				if _, ok := p["text"]; ok {
					break turn
				}
			}
		}
		var parts []map[string]any
		// Three results that are no answer in a row, and it gives up.
		if hasTool && answered < len(g.titles) && results-answered < 3 {
			titles := g.titles[answered : answered+1]
			if g.together {
				titles = g.titles[answered:]
			}
			g.mu.Lock()
			for _, title := range titles {
				g.calls++
				if g.reword && g.calls > 1 {
					title = fmt.Sprintf("%s, written again (%d)", title, g.calls)
				}
				parts = append(parts, map[string]any{"functionCall": map[string]any{"name": "create_ticket", "args": map[string]any{"customer_id": g.customer, "title": title}}})
			}
			g.mu.Unlock()
		} else {
			parts = []map[string]any{{"text": "The ticket is open."}}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"candidates":    []any{map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}},
			"usageMetadata": map[string]any{"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
		})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// written is how many calls the model wrote.
func (g *gemini) written() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

// agentEnv is what an agent process needs: idemflow at base, the model at
// model.
func agentEnv(s *testenv.Stack, base, model string) []string {
	return append(os.Environ(), "IDEMFLOW_URL="+base, "IDEMFLOW_TOKEN="+s.Tokens[testenv.TenantA], "GOOGLE_GEMINI_BASE_URL="+model, "GOOGLE_API_KEY=test")
}

// answered reports whether out has a tool answer of create_ticket that is
// a 201 with want in it.
func answered(out, want string) bool {
	for _, l := range strings.Split(out, "\n") {
		if a, ok := strings.CutPrefix(l, "tool create_ticket "); ok && strings.Contains(a, `"http_status":201`) && strings.Contains(a, want) {
			return true
		}
	}
	return false
}

// Each module's own tests: for ADK, the shared ad3 vectors give the keys
// Python's integration gives; for Genkit, its key rule.
func TestTheModulesOwnTests(t *testing.T) {
	for _, dir := range []string{"adk", "genkittool"} {
		cmd := exec.Command("go", "test", "-count=1", "-v", "./...")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		t.Logf("go test in clients/go/%s:\n%s", dir, out)
		if err != nil {
			t.Errorf("go test in clients/go/%s: %v", dir, err)
		}
	}
}

// framework is one of the modules beside this package, and how its test
// agent (internal/testagent) keeps a conversation across its runs.
type framework struct {
	name, dir string
	// state is the agent's arguments that name where its conversation
	// is kept, in folder.
	state func(folder string) []string
	// controls are the tools of the framework's control cases besides a
	// fresh key per call (naive).
	controls []string
}

var frameworks = []framework{
	{"ADK for Go", "adk", func(folder string) []string { return []string{"-db", filepath.Join(folder, "sessions.db")} }, []string{"call-id"}},
	{"Genkit", "genkittool", func(folder string) []string { return []string{"-history", filepath.Join(folder, "history.json")} }, nil},
}

// An agent of each framework, its conversation kept the framework's way
// (ADK: a SQLite session store; Genkit: the history saved after each
// answered turn), SIGKILLed after idemflow made the ticket and before the
// answer came (or with its request held before idemflow received it),
// before its turn ended, and run again: it sends its message again on the
// conversation, and the model writes the call again (reworded, in one
// case; under a new ID, where the framework gives calls IDs). The key
// names the intended call (ADK: ad3; Genkit: gk1), so there is one
// ticket, and where the first call had executed the rerun's answer is a
// replay. The controls, a fresh key per call and (ADK) the call's ID as
// the key, make two.
func TestAGoFrameworksAgentKilledMidCallSendsItsMessageAgainWithoutADuplicate(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	for _, fw := range frameworks {
		agentBin := build(t, fw.dir, "./internal/testagent")
		type kill struct {
			name     string
			fault    testenv.Fault
			tools    string
			reword   bool
			tickets  int
			replayed string
		}
		cases := []kill{
			{"answer lost", testenv.AnswerLost, "idemflow", false, 1, `"replayed":true`},
			{"request held", testenv.BeforeReceived, "idemflow", false, 1, `"replayed":false`},
			{"answer lost, the call reworded", testenv.AnswerLost, "idemflow", true, 1, `"replayed":true`},
			{"control naive: fresh keys", testenv.AnswerLost, "naive", false, 2, ""},
		}
		for _, tools := range fw.controls {
			cases = append(cases, kill{"control " + tools, testenv.AnswerLost, tools, false, 2, ""})
		}
		for _, c := range cases {
			t.Run(fw.name+"/"+c.name, func(t *testing.T) {
				session := fmt.Sprintf("go-%s-%s-%d", fw.dir, strings.NewReplacer(" ", "-", ",", "", ":", "").Replace(c.name), time.Now().UnixNano()%1e6)
				model := &gemini{customer: session, titles: []string{"Printer on fire"}, reword: c.reword}
				m := model.serve(t)
				p := testenv.NewFaultProxy(t, s.URL, "/v1/tickets", c.fault)
				environ := agentEnv(s, p.URL, m.URL)
				args := append([]string{"-session", session, "-tools", c.tools}, fw.state(t.TempDir())...)
				testenv.KillMidCall(t, "", agentBin, environ, p, args...)
				out := testenv.RunToDone(t, "", agentBin, environ, "DONE", args...)
				n := testenv.Count(t, s.Pool, "ticket", "customer_id = $1", session)
				t.Logf("%s, %s: %d tickets after the kill and the rerun; the model wrote the call %d times", fw.name, c.name, n, model.written())
				if n != c.tickets {
					t.Fatalf("%d tickets, want %d", n, c.tickets)
				}
				if model.written() != 2 {
					t.Fatalf("the model wrote the call %d times, want 2 (once before the kill, once after)", model.written())
				}
				if c.replayed != "" && !answered(out, c.replayed) {
					t.Fatalf("the rerun's answer is not a 201 with %s", c.replayed)
				}
			})
		}
	}
}

// Two calls of one intent in a turn (one after the other, or both in one
// response of the model's) are two tickets, and a later turn in the same
// words is two more: nothing names two intended calls alike.
func TestTwoGoFrameworkCallsInATurnAreTwoTicketsAndALaterTurnIsAnother(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	for _, fw := range frameworks {
		agentBin := build(t, fw.dir, "./internal/testagent")
		for _, together := range []bool{false, true} {
			session := fmt.Sprintf("go-%s-two-%v-%d", fw.dir, together, time.Now().UnixNano()%1e6)
			model := &gemini{customer: session, titles: []string{"Printer on fire", "Printer on fire"}, together: together}
			m := model.serve(t)
			environ := agentEnv(s, s.URL, m.URL)
			args := append([]string{"-session", session}, fw.state(t.TempDir())...)
			testenv.RunToDone(t, "", agentBin, environ, "DONE", args...)
			first := testenv.Count(t, s.Pool, "ticket", "customer_id = $1", session)
			testenv.RunToDone(t, "", agentBin, environ, "DONE", args...)
			then := testenv.Count(t, s.Pool, "ticket", "customer_id = $1", session)
			t.Logf("%s: two identical calls in a turn (together %v), then a later turn: %d, then %d tickets", fw.name, together, first, then)
			if first != 2 || then != 4 {
				t.Errorf("%s: %d, then %d tickets; want 2, then 4", fw.name, first, then)
			}
		}
	}
}

// A regenerate in Genkit: the app sends the turn again on the history it
// saved before the turn (here none), and the model writes the call again,
// reworded. It is the same turn, so the same key: one ticket, and the
// regenerated answer is a replay. (ADK for Go has no rewind: its app has
// no way to send a turn again on the session as it was before the turn.)
func TestAGenkitRegenerateMakesTheSameCallOnce(t *testing.T) {
	agentBin := build(t, "genkittool", "./internal/testagent")
	s := testenv.NewStack(t, testenv.Options{})
	session := fmt.Sprintf("go-genkittool-regenerate-%d", time.Now().UnixNano()%1e6)
	model := &gemini{customer: session, titles: []string{"Printer on fire"}, reword: true}
	m := model.serve(t)
	environ := agentEnv(s, s.URL, m.URL)
	testenv.RunToDone(t, "", agentBin, environ, "DONE", "-session", session, "-history", filepath.Join(t.TempDir(), "history.json"))
	// The history before the turn: nothing saved yet.
	out := testenv.RunToDone(t, "", agentBin, environ, "DONE", "-session", session, "-history", filepath.Join(t.TempDir(), "history.json"))
	n := testenv.Count(t, s.Pool, "ticket", "customer_id = $1", session)
	t.Logf("a turn, then regenerated with the call reworded: %d tickets; the model wrote the call %d times", n, model.written())
	if n != 1 || model.written() != 2 || !answered(out, `"replayed":true`) {
		t.Fatalf("%d tickets, the call written %d times, the regenerated answer replayed: %v; want 1, 2, true", n, model.written(), answered(out, `"replayed":true`))
	}
}

// Each page's program (docs/agents/adk-go.md's is adk/example/main.go,
// docs/agents/genkit-go.md's genkittool/example/main.go), as written; run
// on the stand-in (customer c-1), SIGKILLed while its call waits (the
// answer dropped after the ticket was made) and run again, it makes no
// second ticket.
func TestThePagesProgramsKilledAndRunAgainMakeOneTicket(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	for _, c := range []struct{ page, module, customer string }{
		{"adk-go.md", "adk", "c-1"},
		{"genkit-go.md", "genkittool", "c-1"},
	} {
		t.Run(c.page, func(t *testing.T) {
			page, err := os.ReadFile(filepath.Join("..", "..", "docs", "agents", c.page))
			if err != nil {
				t.Fatal(err)
			}
			program, err := os.ReadFile(filepath.Join(c.module, "example", "main.go"))
			if err != nil {
				t.Fatal(err)
			}
			block := strings.SplitN(strings.SplitN(string(page), "```go\n", 2)[1], "```", 2)[0]
			if !strings.Contains(string(program), block) {
				t.Fatalf("the page's program is not %s/example/main.go's; the page shows:\n%s", c.module, block)
			}
			bin := build(t, c.module, "./example")
			before := testenv.Count(t, s.Pool, "ticket", "customer_id = $1", c.customer)
			model := &gemini{customer: c.customer, titles: []string{"Printer on fire"}}
			m := model.serve(t)
			p := testenv.NewFaultProxy(t, s.URL, "/v1/tickets", testenv.AnswerLost)
			environ := agentEnv(s, p.URL, m.URL)
			dir := t.TempDir()
			testenv.KillMidCall(t, dir, bin, environ, p)
			testenv.RunToDone(t, dir, bin, environ, "The ticket is open.")
			if n := testenv.Count(t, s.Pool, "ticket", "customer_id = $1", c.customer) - before; n != 1 {
				t.Fatalf("%d tickets after the kill and the rerun, want 1", n)
			}
		})
	}
}
