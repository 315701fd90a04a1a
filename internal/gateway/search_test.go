package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
)

// An operator finds any intent by key, tenant and status in Temporal's
// visibility (what the Web UI filters on), and reads the agent's answer as
// JSON in the run's result and details, not as base64.
func TestIntentsAreSearchableByKeyAndStatusAndTheirResultReadsAsJSON(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	ok := s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "find-me-1", Body: ticketBody})
	if ok.Status != 201 {
		t.Fatalf("create: %d %s", ok.Status, ok.Body)
	}
	rejected := s.Do(testenv.Request{Path: "/v1/orders", Token: s.Tokens[testenv.TenantA], Key: "find-me-2",
		Body: `{"customer_id":"c-1","items":[{"sku":"SKU-LAMP","quantity":999}]}`})
	if rejected.Status != 422 {
		t.Fatalf("out-of-stock order: %d %s", rejected.Status, rejected.Body)
	}
	ctx := context.Background()
	find := func(query string) []string {
		t.Helper()
		var ids []string
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp, err := s.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
			if err != nil {
				t.Fatalf("%s: %v", query, err)
			}
			ids = ids[:0]
			for _, e := range resp.Executions {
				ids = append(ids, e.Execution.WorkflowId)
			}
			if len(ids) > 0 || time.Now().After(deadline) {
				return ids
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	q := fmt.Sprintf(`IdempotencyKey = "find-me-1" AND TenantId = %q AND BizType = "ticket.create" AND ExecutionStatus = "Completed"`, testenv.TenantA)
	if ids := find(q); len(ids) != 1 || !strings.HasSuffix(ids[0], "/find-me-1") {
		t.Fatalf("%s: %v", q, ids)
	}
	q = fmt.Sprintf(`TenantId = %q AND ExecutionStatus = "Failed"`, testenv.TenantA)
	if ids := find(q); len(ids) != 1 || !strings.HasSuffix(ids[0], "/find-me-2") {
		t.Fatalf("%s: %v", q, ids)
	}
	// A key too long for a readable workflow ID (hashed there) is found
	// by the key itself: the search attribute holds the original.
	long := strings.Repeat("k", 250) + "-long"
	if r := s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: long, Body: ticketBody}); r.Status != 201 {
		t.Fatalf("long key: %d %s", r.Status, r.Body)
	}
	if ids := find(fmt.Sprintf(`IdempotencyKey = %q`, long)); len(ids) != 1 || !strings.Contains(ids[0], "/sha256,") {
		t.Fatalf("by a 255-character key: %v", ids)
	}
	// Tenant B has none (asked once: the others are visible by now).
	if resp, err := s.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf(`TenantId = %q`, testenv.TenantB)}); err != nil || len(resp.Executions) != 0 {
		t.Fatalf("tenant B: %v %v", resp, err)
	}

	wid := find(`IdempotencyKey = "find-me-1"`)[0]
	desc, err := s.Temporal.DescribeWorkflowExecution(ctx, wid, "")
	if err != nil {
		t.Fatal(err)
	}
	// How the intent ended is the run's ExecutionStatus: the run writes
	// no search attribute of its own (#22), so its visibility is written
	// at start and at close, as a bare workflow's is.
	if _, ok := desc.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()["IntentStatus"]; ok {
		t.Error("a new run still carries IntentStatus")
	}
	for it := s.Temporal.GetWorkflowHistory(ctx, wid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT); it.HasNext(); {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetEventType() == enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES {
			t.Errorf("the run upserted search attributes: %v", ev.GetUpsertWorkflowSearchAttributesEventAttributes())
		}
	}
	if sum := string(desc.GetExecutionConfig().GetUserMetadata().GetSummary().GetData()); !strings.Contains(sum, "ticket for") {
		t.Errorf("summary %q", sum)
	}
	if det := string(desc.GetExecutionConfig().GetUserMetadata().GetDetails().GetData()); !strings.Contains(det, "find-me-1") || !strings.Contains(det, testenv.TenantA) {
		t.Errorf("details %q", det)
	}
	iter := s.Temporal.GetWorkflowHistory(ctx, wid, "", false, 0)
	var result string
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetWorkflowExecutionCompletedEventAttributes(); a != nil {
			result = string(a.GetResult().GetPayloads()[0].GetData())
		}
	}
	if !strings.Contains(result, `"body":{"ticket_id":`) {
		t.Errorf("the result the Web UI shows is not readable JSON: %s", result)
	}
}

// Each log line about an intent names its tenant, key and workflow ID, so
// that one search follows it; none holds the token or the body.
func TestIntentLogLinesNameTenantKeyAndWorkflowButNoSecret(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	var buf syncBuffer
	s.Gateway.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	tok := s.Tokens[testenv.TenantA]
	if r := s.Do(testenv.Request{Path: "/v1/tickets", Token: tok, Key: "log-1", Body: ticketBody}); r.Status != 201 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	logs := buf.String()
	var line string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "msg=http") && strings.Contains(l, "path=/v1/tickets") {
			line = l
		}
	}
	for _, want := range []string{"tenant=" + testenv.TenantA, "key=log-1", "workflow_id=ticket/" + testenv.TenantA + "/log-1", "status=201"} {
		if !strings.Contains(line, want) {
			t.Errorf("the request's line lacks %s: %q", want, line)
		}
	}
	if strings.Contains(logs, tok) || strings.Contains(logs, "Refund not received") {
		t.Errorf("a token or a body reached the log:\n%s", logs)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
