// Command testagent is the Genkit agent of the kill tests
// (clients/go/go_test.go): a generate call with one tool that creates a
// ticket through idemflow, on Genkit's Google AI plugin pointed at the
// tests' stand-in (GOOGLE_GEMINI_BASE_URL), its history saved in a file
// after each answered turn. Run again with the same -session and
// -history, it sends the user's message again on the saved history, as an
// app resumes a turn that never ended.
//
//	testagent -session S -history FILE [-tools idemflow|naive]
//
// with IDEMFLOW_URL and IDEMFLOW_TOKEN set. -tools naive is the control
// (a fresh key on every call).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"time"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/genkit"
	"github.com/firebase/genkit/go/plugins/googlegenai"
	"github.com/google/uuid"

	"github.com/idemflow/idemflow/agentclient"
	"github.com/idemflow/idemflow/clients/go/genkittool"
	"github.com/idemflow/idemflow/intent"
)

type ticket struct {
	CustomerID string `json:"customer_id"`
	Title      string `json:"title"`
}

func main() {
	session := flag.String("session", "", "the conversation")
	file := flag.String("history", "", "the file of the conversation's history")
	tools := flag.String("tools", "idemflow", "idemflow, or the control: naive")
	flag.Parse()
	if err := run(context.Background(), *session, *file, *tools); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, session, file, tools string) error {
	g := genkit.Init(ctx, genkit.WithPlugins(&googlegenai.GoogleAI{}), genkit.WithDefaultModel("googleai/gemini-2.5-flash"))
	// The client's attempts time out fast, so that a dropped answer is
	// retried at once (the kill comes first).
	client := &agentclient.Client{BaseURL: os.Getenv("IDEMFLOW_URL"), Token: os.Getenv("IDEMFLOW_TOKEN"), AttemptTimeout: 3 * time.Second, Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond}
	keys := genkittool.New(client)
	var tool ai.Tool
	if tools == "idemflow" {
		tool = genkittool.DefineTool[ticket](g, keys, genkittool.Config{
			Name: "create_ticket", Description: "Create a support ticket.", Path: "/v1/tickets",
			Intent: intent.Fields{{Name: "customer_id", Norm: intent.ID}},
		})
	} else {
		tool = genkit.DefineTool(g, "create_ticket", "Create a support ticket.", func(tc *ai.ToolContext, in ticket) (map[string]any, error) {
			body, _ := json.Marshal(in)
			res, err := client.Do(tc, agentclient.Intent{Key: uuid.NewString(), Method: "POST", Path: "/v1/tickets", Body: body})
			if err != nil {
				return nil, err
			}
			return map[string]any{"http_status": res.Status, "replayed": res.Replayed, "result": res.Body}, nil
		})
	}
	var history []*ai.Message
	if raw, err := os.ReadFile(file); err == nil {
		if err := json.Unmarshal(raw, &history); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	fmt.Println("running", session)
	ctx, keyed := keys.Conversation(ctx, session)
	resp, err := genkit.Generate(ctx, g, ai.WithMessages(history...), ai.WithPrompt("Open a ticket: the printer is on fire."), ai.WithTools(tool), ai.WithMiddleware(keyed))
	if err != nil {
		return err
	}
	all := resp.History()
	for _, m := range all[len(history):] {
		for _, p := range m.Content {
			if p.IsToolResponse() {
				raw, _ := json.Marshal(p.ToolResponse.Output)
				fmt.Printf("tool %s %s\n", p.ToolResponse.Name, raw)
			}
		}
	}
	raw, err := json.Marshal(all)
	if err != nil {
		return err
	}
	if err := os.WriteFile(file, raw, 0o600); err != nil {
		return err
	}
	fmt.Println("DONE", resp.Text())
	return nil
}
