// Command example is docs/agents/genkit-go.md's program: a Genkit
// conversation whose ticket tool runs through idemflow, its history saved
// in a file after each answered turn. Killed mid call and run again, it
// sends its message again on the saved history, and the call the model
// writes again is a replay.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"

	"github.com/firebase/genkit/go/ai"
	"github.com/firebase/genkit/go/genkit"
	"github.com/firebase/genkit/go/plugins/googlegenai"

	"github.com/idemflow/idemflow/agentclient"
	"github.com/idemflow/idemflow/clients/go/genkittool"
	"github.com/idemflow/idemflow/intent"
)

type Ticket struct {
	CustomerID string `json:"customer_id"`
	Title      string `json:"title"`
}

func main() {
	ctx := context.Background()
	g := genkit.Init(ctx, genkit.WithPlugins(&googlegenai.GoogleAI{}), genkit.WithDefaultModel("googleai/gemini-2.5-flash"))
	keys := genkittool.New(&agentclient.Client{BaseURL: os.Getenv("IDEMFLOW_URL"), Token: os.Getenv("IDEMFLOW_TOKEN")})
	createTicket := genkittool.DefineTool[Ticket](g, keys, genkittool.Config{
		Name:        "create_ticket",
		Description: "Create a support ticket.",
		Path:        "/v1/tickets",
		// The ticket's intent: its customer, never its wording.
		Intent: intent.Fields{{Name: "customer_id", Norm: intent.ID}},
	})

	// The conversation's history, saved after each answered turn.
	var history []*ai.Message
	if raw, err := os.ReadFile("history.json"); err == nil {
		if err := json.Unmarshal(raw, &history); err != nil {
			log.Fatal(err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		log.Fatal(err)
	}
	// The conversation's ID, the same when the app runs it again after a crash.
	ctx, keyed := keys.Conversation(ctx, "ticket-42")
	resp, err := genkit.Generate(ctx, g,
		ai.WithMessages(history...),
		ai.WithPrompt("Customer c-1: the printer is on fire. Open a ticket."),
		ai.WithTools(createTicket),
		ai.WithMiddleware(keyed),
	)
	if err != nil {
		log.Fatal(err)
	}
	raw, err := json.Marshal(resp.History())
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("history.json", raw, 0o600); err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Text())
}
