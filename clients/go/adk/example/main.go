// Command example is docs/agents/adk-go.md's program: an ADK agent whose
// ticket tool runs through idemflow, on a session stored in SQLite. Killed
// mid call and run again, it sends its message again on the session, and
// the call the model writes again is a replay.
package main

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/glebarez/sqlite"
	"google.golang.org/adk/agent"
	"google.golang.org/adk/agent/llmagent"
	"google.golang.org/adk/model/gemini"
	"google.golang.org/adk/runner"
	"google.golang.org/adk/session/database"
	"google.golang.org/adk/tool"
	"google.golang.org/genai"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemflow/idemflow/agentclient"
	"github.com/idemflow/idemflow/clients/go/adk"
	"github.com/idemflow/idemflow/intent"
)

type Ticket struct {
	CustomerID string `json:"customer_id"`
	Title      string `json:"title"`
}

func main() {
	ctx := context.Background()
	sessions, err := database.NewSessionService(sqlite.Open("adk-sessions.db"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	if err := database.AutoMigrate(sessions); err != nil {
		log.Fatal(err)
	}
	client := &agentclient.Client{BaseURL: os.Getenv("IDEMFLOW_URL"), Token: os.Getenv("IDEMFLOW_TOKEN")}
	createTicket, err := adk.NewTool[Ticket](client, adk.Config{
		Tool: agentclient.Tool{
			Name:        "create_ticket",
			Description: "Create a support ticket.",
			Path:        "/v1/tickets",
			// The ticket's intent: its customer, never its wording.
			Intent: intent.Fields{{Name: "customer_id", Norm: intent.ID}},
		},
		Sessions: sessions,
	})
	if err != nil {
		log.Fatal(err)
	}
	model, err := gemini.NewModel(ctx, "gemini-2.5-flash", &genai.ClientConfig{APIKey: os.Getenv("GOOGLE_API_KEY")})
	if err != nil {
		log.Fatal(err)
	}
	support, err := llmagent.New(llmagent.Config{
		Name:        "support",
		Model:       model,
		Instruction: "Open the tickets the customer asks for.",
		Tools:       []tool.Tool{createTicket},
	})
	if err != nil {
		log.Fatal(err)
	}
	r, err := runner.New(runner.Config{AppName: "support_app", Agent: support, SessionService: sessions, AutoCreateSession: true})
	if err != nil {
		log.Fatal(err)
	}
	// The conversation's ID, the same when the app runs it again after a crash.
	msg := genai.NewContentFromText("Customer c-1: the printer is on fire. Open a ticket.", genai.RoleUser)
	for ev, err := range r.Run(ctx, "u-1", "ticket-42", msg, agent.RunConfig{}) {
		if err != nil {
			log.Fatal(err)
		}
		if ev.IsFinalResponse() && ev.Content != nil {
			for _, p := range ev.Content.Parts {
				fmt.Println(p.Text)
			}
		}
	}
}
