package idemflowtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
)

type kitNoteRequest struct {
	Text string `json:"text"`
}

// kitNote is the external test's note operation, under a name of its own.
var kitNote = noteOp("kit_note_internal", ", CONSTRAINT kit_note_internal_tenant_key UNIQUE (tenant_id, idem_key)")

// noteOp declares a note operation on table name, whose columns are
// followed by constraints.
func noteOp(name, constraints string) *op.Operation {
	return op.Define(op.Spec[kitNoteRequest, kitNoteRequest]{
		Name:        name,
		Description: "Write a note once.",
		Step: func(ctx context.Context, tx pgx.Tx, in op.In[kitNoteRequest]) (kitNoteRequest, error) {
			_, err := tx.Exec(ctx, `INSERT INTO `+name+` VALUES ($1, $2, $3)`, in.TenantID, in.Key, in.Request.Text)
			return in.Request, err
		},
		Lookup: func(ctx context.Context, q op.Querier, tenantID, key string) (kitNoteRequest, bool, error) {
			var r kitNoteRequest
			err := q.QueryRow(ctx, `SELECT text FROM `+name+` WHERE tenant_id = $1 AND idem_key = $2`, tenantID, key).Scan(&r.Text)
			if errors.Is(err, pgx.ErrNoRows) {
				return r, false, nil
			}
			return r, err == nil, err
		},
		View:  func(r kitNoteRequest) op.Answer { return op.Answer{Status: 201, Body: r} },
		Table: name,
		Migrations: fstest.MapFS{"001_" + name + ".sql": {Data: []byte(`CREATE TABLE ` + name + ` (tenant_id text NOT NULL,
		idem_key text NOT NULL, text text NOT NULL` + constraints + `);`)}},
	})
}

// A declared operation whose table has no unique (tenant_id, idem_key)
// could write a duplicate: the kit refuses to start it, naming the table,
// as every role does.
func TestTheKitRefusesATableWithoutItsUniqueKey(t *testing.T) {
	rec := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != nil {
				if _, ok := p.(failedNow); !ok {
					panic(p)
				}
			}
		}()
		Start(rec, noteOp("kit_note_unkeyed", ""))
	}()
	if !strings.Contains(rec.msg, "kit_note_unkeyed") || !strings.Contains(rec.msg, "no unique index on (tenant_id, idem_key)") {
		t.Fatalf("Start of an operation whose table lacks its unique key: %q, want a refusal naming the table", rec.msg)
	}
}

// recorder is a test that a check fails, without failing the real one.
type recorder struct {
	testing.TB
	msg string
}

type failedNow struct{}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(failedNow{})
}
func (r *recorder) Fatal(args ...any) {
	r.msg = fmt.Sprint(args...)
	panic(failedNow{})
}

// failure runs check on s with a recorder for a test, and returns what it
// failed with ("" when it passed).
func failure(t *testing.T, s *Stack, check func()) string {
	t.Helper()
	rec := &recorder{TB: t}
	keep := s.t
	s.t = rec
	defer func() { s.t = keep }()
	func() {
		defer func() {
			if p := recover(); p != nil {
				if _, ok := p.(failedNow); !ok {
					panic(p)
				}
			}
		}()
		check()
	}()
	return rec.msg
}

// Each check fails when what it guards is broken: a replay that is not
// the first answer, a "conflict" that executed, a storm answered two ways,
// a table without its constraint.
func TestTheKitsChecksFail(t *testing.T) {
	s := Start(t, kitNote)
	const path = "/v1/kit_note_internal"
	first := s.Post(TenantA, path, "k-1", `{"text":"hello"}`)
	if first.Status != http.StatusCreated {
		t.Fatalf("%d %s", first.Status, first.Body)
	}
	other := first
	other.Body = []byte(`{"key":"k-1","text":"not what was answered"}`)
	if msg := failure(t, s, func() { s.Replay(TenantA, path, "k-1", `{"text":"hello"}`, other) }); !strings.Contains(msg, "want the first answer") {
		t.Errorf("Replay against another answer: %q", msg)
	}
	if msg := failure(t, s, func() { s.Conflict(TenantA, path, "k-2", `{"text":"new"}`) }); !strings.Contains(msg, "want 422") {
		t.Errorf("Conflict on a key never used: %q", msg)
	}

	// A gateway that executes every copy: each answer its own.
	var n atomic.Int64
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"n":%d}`, n.Add(1))
	}))
	defer broken.Close()
	url := s.URL
	s.URL = broken.URL
	if msg := failure(t, s, func() { s.Storm(TenantA, path, "storm", `{"text":"storm"}`, 4) }); !strings.Contains(msg, "two answers") {
		t.Errorf("Storm against a gateway that executes every copy: %q", msg)
	}
	s.URL = url

	if _, err := s.Pool.Exec(context.Background(), `ALTER TABLE kit_note_internal DROP CONSTRAINT kit_note_internal_tenant_key`); err != nil {
		t.Fatal(err)
	}
	if msg := failure(t, s, s.Audit); !strings.Contains(msg, "kit_note_internal") {
		t.Errorf("Audit without the operation's constraint: %q", msg)
	}
}
