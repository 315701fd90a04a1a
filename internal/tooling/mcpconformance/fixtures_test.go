package mcpconformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing/fstest"
	"time"

	"github.com/google/uuid"
	"github.com/idemflow/idemflow/op"
	"github.com/jackc/pgx/v5"
)

// The suite's test tools, declared as idemflow operations, so that its
// Tasks scenarios run through idemflow's own machinery: the gateway, a
// workflow and an activity on Temporal, a row in PostgreSQL under
// UNIQUE (tenant_id, idem_key), and the MCP server's tasks. Each writes
// one row per key, as any operation does. Only these tests serve them.

// fixtureTable is a fixture's table: its key and its answer.
func fixtureTable(name string) fstest.MapFS {
	return fstest.MapFS{"001_" + name + ".sql": {Data: []byte(`CREATE TABLE IF NOT EXISTS ` + name +
		` (tenant_id text NOT NULL, idem_key text NOT NULL, answer jsonb NOT NULL, UNIQUE (tenant_id, idem_key));`)}}
}

// fixture declares an operation named name whose step computes its answer
// with do, then keeps it in its row.
func fixture[R any](name, description string, tasks op.TaskSupport, do func(ctx context.Context, r R) (map[string]any, error)) *op.Operation {
	return op.Define(op.Spec[R, map[string]any]{
		Name:        name,
		Description: description,
		Tasks:       tasks,
		Step: func(ctx context.Context, tx pgx.Tx, in op.In[R]) (map[string]any, error) {
			answer, err := do(ctx, in.Request)
			if err != nil {
				return nil, err
			}
			_, err = tx.Exec(ctx, `INSERT INTO `+name+` (tenant_id, idem_key, answer) VALUES ($1, $2, $3)`, in.TenantID, in.Key, answer)
			return answer, err
		},
		Lookup: func(ctx context.Context, q op.Querier, tenantID, key string) (map[string]any, bool, error) {
			var answer map[string]any
			err := q.QueryRow(ctx, `SELECT answer FROM `+name+` WHERE tenant_id = $1 AND idem_key = $2`, tenantID, key).Scan(&answer)
			if err == pgx.ErrNoRows {
				return nil, false, nil
			}
			return answer, err == nil, err
		},
		View:       func(answer map[string]any) op.Answer { return op.Answer{Body: answer} },
		Table:      name,
		Migrations: fixtureTable(name),
		Rejections: map[string]string{"job-failed": "the job failed, as failing_job always does"},
	})
}

type greetArgs struct {
	Name string `json:"name"`
}

type computeArgs struct {
	Seconds float64 `json:"seconds"`
	Label   string  `json:"label,omitempty"`
}

type noArgs struct{}

// fixtures are the suite's Tasks fixtures (its scenarios' "Required
// server fixtures"): greet, sync-only; slow_compute, a step of `seconds`
// seconds; failing_job, a task-only step that always fails, after about
// a second, with a tool execution error.
func fixtures() []*op.Operation {
	return []*op.Operation{
		fixture("greet", "Greet someone by name.", op.TasksForbidden, func(_ context.Context, r greetArgs) (map[string]any, error) {
			return map[string]any{"greeting": "Hello, " + r.Name + "!"}, nil
		}),
		fixture("slow_compute", "Compute for the given number of seconds.", op.TasksOptional, func(ctx context.Context, r computeArgs) (map[string]any, error) {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Duration(r.Seconds * float64(time.Second))):
			}
			return map[string]any{"label": r.Label, "seconds": r.Seconds, "result": fmt.Sprintf("computed %s in %gs", r.Label, r.Seconds)}, nil
		}),
		fixture("failing_job", "A job that always fails.", op.TasksRequired, func(ctx context.Context, _ noArgs) (map[string]any, error) {
			time.Sleep(time.Second)
			return nil, &op.Rejection{Code: "job-failed", Reason: "the job failed, as it always does"}
		}),
	}
}

// asAClient adds what a durable client adds to each tools/call the suite
// makes, which the suite, knowing nothing of keys, does not: an
// idempotency_key of the call's own, new for each call. Everything else
// passes as sent.
func asAClient(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var msg map[string]any
		if json.Unmarshal(body, &msg) == nil && msg["method"] == "tools/call" {
			if p, ok := msg["params"].(map[string]any); ok {
				args, _ := p["arguments"].(map[string]any)
				if args == nil {
					args = map[string]any{}
				}
				if _, ok := args["idempotency_key"]; !ok {
					args["idempotency_key"] = "conformance-" + uuid.NewString()
					p["arguments"] = args
					if b, err := json.Marshal(msg); err == nil {
						body = b
					}
				}
			}
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		next.ServeHTTP(w, r)
	})
}
