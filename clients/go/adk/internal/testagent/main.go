// Command testagent is the ADK agent of the kill tests
// (clients/go/go_test.go): a real llmagent and runner on a SQLite session
// store, Gemini's client pointed at the tests' stand-in
// (GOOGLE_GEMINI_BASE_URL), and one tool that creates a ticket through
// idemflow. Run again with the same -session and -db, it sends the user's
// message again on the session, as an app resumes a turn that never ended.
//
//	testagent -session S -db FILE [-tools idemflow|naive|call-id]
//
// with IDEMFLOW_URL and IDEMFLOW_TOKEN set. -tools naive is the control (a
// fresh key on every call); -tools call-id keys each call by its ID, which
// ADK makes anew when the model writes the call again.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/google/uuid"
	"google.golang.org/adk/agent"
	"google.golang.org/adk/agent/llmagent"
	"google.golang.org/adk/model/gemini"
	"google.golang.org/adk/runner"
	"google.golang.org/adk/session"
	"google.golang.org/adk/session/database"
	"google.golang.org/adk/tool"
	"google.golang.org/adk/tool/functiontool"
	"google.golang.org/genai"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemflow/idemflow/agentclient"
	"github.com/idemflow/idemflow/clients/go/adk"
	"github.com/idemflow/idemflow/intent"
)

type ticket struct {
	CustomerID string `json:"customer_id"`
	Title      string `json:"title"`
}

func main() {
	id := flag.String("session", "", "the session (the conversation)")
	db := flag.String("db", "", "the SQLite file of the sessions")
	tools := flag.String("tools", "idemflow", "idemflow, or a control: naive, call-id")
	flag.Parse()
	if err := run(context.Background(), *id, *db, *tools); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, id, db, tools string) error {
	sessions, err := database.NewSessionService(sqlite.Open(db), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	if err := database.AutoMigrate(sessions); err != nil {
		return err
	}
	// The client's attempts time out fast, so that a dropped answer is
	// retried at once (the kill comes first).
	client := &agentclient.Client{BaseURL: os.Getenv("IDEMFLOW_URL"), Token: os.Getenv("IDEMFLOW_TOKEN"), AttemptTimeout: 3 * time.Second, Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond}
	var t tool.Tool
	if tools == "idemflow" {
		t, err = adk.NewTool[ticket](client, adk.Config{
			Tool: agentclient.Tool{
				Name: "create_ticket", Description: "Create a support ticket.", Path: "/v1/tickets",
				Intent: intent.Fields{{Name: "customer_id", Norm: intent.ID}},
			},
			Sessions: sessions,
		})
	} else {
		t, err = functiontool.New(functiontool.Config{Name: "create_ticket", Description: "Create a support ticket."}, func(ctx agent.ToolContext, in ticket) (map[string]any, error) {
			key := uuid.NewString()
			if tools == "call-id" {
				key = "adk-call-" + ctx.FunctionCallID()
			}
			body, _ := json.Marshal(in)
			res, err := client.Do(ctx, agentclient.Intent{Key: key, Method: "POST", Path: "/v1/tickets", Body: body})
			if err != nil {
				return nil, err
			}
			return map[string]any{"http_status": res.Status, "replayed": res.Replayed, "result": res.Body}, nil
		})
	}
	if err != nil {
		return err
	}
	model, err := gemini.NewModel(ctx, "gemini-2.5-flash", &genai.ClientConfig{APIKey: os.Getenv("GOOGLE_API_KEY")})
	if err != nil {
		return err
	}
	support, err := llmagent.New(llmagent.Config{Name: "support", Model: model, Instruction: "Open the tickets the customer asks for.", Tools: []tool.Tool{t}})
	if err != nil {
		return err
	}
	r, err := runner.New(runner.Config{AppName: "support_app", Agent: support, SessionService: sessions, AutoCreateSession: true})
	if err != nil {
		return err
	}
	fmt.Println("running", id)
	msg := genai.NewContentFromText("Open a ticket: the printer is on fire.", genai.RoleUser)
	for ev, err := range r.Run(ctx, "u-1", id, msg, agent.RunConfig{}) {
		if err != nil {
			return err
		}
		printEvent(ev)
	}
	return nil
}

// printEvent prints each tool answer (tool create_ticket {...}) and the
// final text (DONE ...), the lines the kill test reads.
func printEvent(ev *session.Event) {
	if ev.Content == nil {
		return
	}
	for _, p := range ev.Content.Parts {
		if p.FunctionResponse != nil {
			raw, _ := json.Marshal(p.FunctionResponse.Response)
			fmt.Printf("tool %s %s\n", p.FunctionResponse.Name, raw)
		}
		if ev.IsFinalResponse() && p.Text != "" {
			fmt.Println("DONE", p.Text)
		}
	}
}
