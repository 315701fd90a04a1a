package idemflowtest_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/idemflow/idemflow/idemflowtest"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
)

// A team's operation, as small as one can be: a note written once.
type noteRequest struct {
	Text string `json:"text"`
}

type note struct{ Key, Text string }

var noteOp = op.Define(op.Spec[noteRequest, note]{
	Name:        "kit_note",
	Description: "Write a note once.",
	Step: func(ctx context.Context, tx pgx.Tx, in op.In[noteRequest]) (note, error) {
		if in.Request.Text == "refuse" {
			return note{}, &op.Rejection{Code: "note-refused", Reason: "this note is refused"}
		}
		_, err := tx.Exec(ctx, `INSERT INTO kit_note (tenant_id, idem_key, text) VALUES ($1, $2, $3)`, in.TenantID, in.Key, in.Request.Text)
		return note{Key: in.Key, Text: in.Request.Text}, err
	},
	Lookup: func(ctx context.Context, q op.Querier, tenantID, key string) (note, bool, error) {
		n := note{Key: key}
		err := q.QueryRow(ctx, `SELECT text FROM kit_note WHERE tenant_id = $1 AND idem_key = $2`, tenantID, key).Scan(&n.Text)
		if errors.Is(err, pgx.ErrNoRows) {
			return n, false, nil
		}
		return n, err == nil, err
	},
	View: func(n note) op.Answer {
		return op.Answer{Status: 201, Body: map[string]string{"key": n.Key, "text": n.Text}}
	},
	Table:      "kit_note",
	Rejections: map[string]string{"note-refused": "The note was refused; nothing was written."},
	Migrations: fstest.MapFS{"001_kit_note.sql": {Data: []byte(`CREATE TABLE kit_note (tenant_id text NOT NULL, idem_key text NOT NULL,
		text text NOT NULL, CONSTRAINT kit_note_tenant_key UNIQUE (tenant_id, idem_key));`)}},
})

func TestMain(m *testing.M) { idemflowtest.Main(m, noteOp) }

const path = "/v1/kit_note"

// Each helper on a real stack: a post, its replay, a reused key's
// conflict, a storm of one intent, the other tenant's own key, a
// rejection, the MCP tool, and the audit.
func TestTheKitsHelpersOnARealStack(t *testing.T) {
	s := idemflowtest.Start(t, noteOp)
	first := s.Post(idemflowtest.TenantA, path, "k-1", `{"text":"hello"}`)
	if first.Status != http.StatusCreated || first.Replayed() {
		t.Fatalf("a new note: %d %s", first.Status, first.Body)
	}
	s.Replay(idemflowtest.TenantA, path, "k-1", `{"text":"hello"}`, first)
	s.Conflict(idemflowtest.TenantA, path, "k-1", `{"text":"other"}`)

	answers := s.Storm(idemflowtest.TenantA, path, "storm-1", `{"text":"storm"}`, 8)
	if len(answers) != 8 {
		t.Fatalf("%d answers", len(answers))
	}
	if n := s.Count("kit_note", "idem_key = 'storm-1'"); n != 1 {
		t.Fatalf("a storm of 8 wrote %d notes", n)
	}

	if r := s.Post(idemflowtest.TenantB, path, "k-1", `{"text":"B's own"}`); r.Status != http.StatusCreated || r.Replayed() {
		t.Fatalf("another tenant's key: %d %s", r.Status, r.Body)
	}
	if r := s.Post(idemflowtest.TenantA, path, "refused", `{"text":"refuse"}`); r.Status != http.StatusUnprocessableEntity || r.Problem() != "note-refused" {
		t.Fatalf("a rejection: %d %s (%q)", r.Status, r.Body, r.Problem())
	}
	if n := s.Count("kit_note", "idem_key = 'refused'"); n != 0 {
		t.Fatalf("a refused note was written")
	}

	m := s.MCP(idemflowtest.TenantA)
	if schema := m.Schema("kit_note"); !strings.Contains(string(schema), `"text"`) {
		t.Fatalf("the tool's schema: %s", schema)
	}
	args := map[string]any{"idempotency_key": "mcp-1", "text": "by a model"}
	if res, first := m.Call("kit_note", args); res.IsError || first.HTTPStatus != 201 || first.Replayed {
		t.Fatalf("the tool: %+v", first)
	}
	if _, again := m.Call("kit_note", args); !again.Replayed {
		t.Fatalf("the tool again: %+v", again)
	}
	s.Audit()
}

// A worker process killed while the step holds its transaction: the next
// worker finishes the intent with one row.
func TestAWorkerKilledMidStep(t *testing.T) {
	s := idemflowtest.StartWith(t, idemflowtest.Options{Operations: []*op.Operation{noteOp}, WorkerProcess: true})
	s.StartWorker()
	r := s.KillWorkerMidStep(noteOp, idemflowtest.TenantA, "killed", `{"text":"survives"}`)
	if r.Status != http.StatusCreated {
		t.Fatalf("after the kill: %d %s", r.Status, r.Body)
	}
}
