package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/idemflow/idemflow/idem"
	"github.com/idemflow/idemflow/internal/apperr"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// inspection is everything known about one intent.
type inspection struct {
	TenantID string         `json:"tenant_id"`
	Key      string         `json:"idempotency_key"`
	Record   *inspectRecord `json:"record"`
	Row      *inspectRow    `json:"business_row"`
	// Details are what the key's operation shows beyond its row (an
	// order's events; op.Spec.Inspect).
	Details  []string    `json:"details,omitempty"`
	Workflow *inspectRun `json:"workflow"`
	UILink   string      `json:"ui_link,omitempty"`
	Notes    []string    `json:"notes,omitempty"`
}

type inspectRecord struct {
	Status      idem.Status     `json:"status"`
	BizType     string          `json:"biz_type"`
	Fingerprint string          `json:"fingerprint"`
	Attempts    int             `json:"attempts"`
	HTTPStatus  int             `json:"response_status,omitempty"`
	Answer      json.RawMessage `json:"response_body,omitempty"`
	Error       string          `json:"error_reason,omitempty"`
	WorkflowID  string          `json:"workflow_id"`
	CreatedAt   time.Time       `json:"created_at"`
	UpdatedAt   time.Time       `json:"updated_at"`
	ExpireAt    time.Time       `json:"expire_at"`
}

type inspectRow struct {
	BizType     string          `json:"biz_type"`
	Fingerprint string          `json:"fingerprint"`
	WorkflowID  string          `json:"workflow_id"`
	Answer      json.RawMessage `json:"answer,omitempty"`
}

type inspectRun struct {
	ID      string   `json:"workflow_id"`
	RunID   string   `json:"run_id,omitempty"`
	Status  string   `json:"status"`
	Summary string   `json:"summary,omitempty"`
	History []string `json:"history,omitempty"`
}

// runInspect prints what PostgreSQL and Temporal know of one intent: an
// operator's answer to "what happened to acme's key X?".
func runInspect(ctx context.Context, env *Env, args []string) error {
	var c common
	fs := flags("inspect", env)
	c.registerTemporal(fs)
	fs.StringVar(&c.databaseURL, "database-url", "", "PostgreSQL URL; default: a running dev stack's (env DATABASE_URL)")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	uiURL := fs.String("ui-url", "", "the Temporal Web UI's base URL, for the link; default: a running dev stack's (env IDEMFLOW_UI_URL)")
	dataDirFlag(fs)
	var toolsFile string
	registerTools(fs, &toolsFile)
	if err := parseDevFlags(fs, args); err != nil {
		return err
	}
	if err := env.useTools(toolsFile, false); err != nil {
		return err
	}
	if err := c.resolveTemporal(); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return fmt.Errorf("%w: idemflow inspect [flags] <tenant> <key>", errUsage)
	}
	tenantID, key := fs.Arg(0), fs.Arg(1)
	if c.databaseURL == "" {
		return fmt.Errorf("%w: DATABASE_URL (or --database-url, or a running 'idemflow dev') is required", errUsage)
	}
	conn, err := connect(ctx, c.databaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	in := inspection{TenantID: tenantID, Key: key}
	var workflowID string
	rec, err := idemStore(conn).Get(ctx, tenantID, key)
	switch {
	case errors.Is(err, apperr.ErrNotFound):
		in.Notes = append(in.Notes, "no idempotency record (never claimed, or purged after its retention)")
	case err != nil:
		return err
	default:
		in.Record = &inspectRecord{Status: rec.Status, BizType: rec.BizType, Fingerprint: rec.Fingerprint, Attempts: rec.Attempts,
			HTTPStatus: rec.Response.Status, Answer: jsonOrNil(rec.Response.Body), Error: rec.ErrorReason, WorkflowID: rec.WorkflowID,
			CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt, ExpireAt: rec.ExpireAt}
		workflowID = rec.WorkflowID
	}
	prior, found, err := env.Set.Recall(ctx, conn, tenantID, key)
	if err != nil {
		return err
	}
	if found {
		in.Row = &inspectRow{BizType: prior.BizType, Fingerprint: prior.Fingerprint, WorkflowID: prior.WorkflowID, Answer: jsonOrNil(prior.Outcome.Body)}
		workflowID = cmp.Or(workflowID, prior.WorkflowID)
	} else {
		in.Notes = append(in.Notes, "no business row: nothing was written under this key")
	}
	if biz := bizTypeOf(in); biz != "" {
		if in.Details, err = env.Set.Inspect(ctx, conn, biz, tenantID, key); err != nil {
			return err
		}
	}
	if workflowID != "" {
		in.Workflow = &inspectRun{ID: workflowID, Status: "unknown"}
		if *uiURL != "" {
			in.UILink = strings.TrimRight(*uiURL, "/") + "/namespaces/" + url.PathEscape(c.namespace) + "/workflows/" + url.PathEscape(workflowID)
		}
		if err := inspectWorkflow(ctx, env, c, in.Workflow); err != nil {
			in.Notes = append(in.Notes, "Temporal: "+err.Error())
		}
	}
	if *asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(in); err != nil {
			return err
		}
	} else {
		printInspection(env, in)
	}
	if in.Record == nil && in.Row == nil {
		// A probe or a script must tell found from missing.
		return exitCodeError{code: ExitNotFound, err: fmt.Errorf("nothing is known of tenant %s key %q", tenantID, key)}
	}
	return nil
}

// bizTypeOf is the business type the key's record or row names: the
// operation whose view inspect shows.
func bizTypeOf(in inspection) string {
	if in.Record != nil {
		return in.Record.BizType
	}
	if in.Row != nil {
		return in.Row.BizType
	}
	return ""
}

// ExitNotFound is inspect's exit code when nothing is known of the key: no
// record, no business row.
const ExitNotFound = 4

func inspectWorkflow(ctx context.Context, env *Env, c common, run *inspectRun) error {
	tc, err := dialTemporal(ctx, env.Logger, c.temporal, c.namespace, c.tls, client.Options{})
	if err != nil {
		return err
	}
	defer tc.Close()
	desc, err := tc.DescribeWorkflowExecution(ctx, run.ID, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		run.Status = "not in Temporal (never started, or past the namespace retention)"
		return nil
	}
	if err != nil {
		return err
	}
	info := desc.GetWorkflowExecutionInfo()
	run.RunID = info.GetExecution().GetRunId()
	run.Status = info.GetStatus().String()
	run.Summary = payloadText(desc.GetExecutionConfig().GetUserMetadata().GetSummary())
	iter := tc.GetWorkflowHistory(ctx, run.ID, run.RunID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return err
		}
		if line := historyLine(ev); line != "" {
			run.History = append(run.History, ev.GetEventTime().AsTime().UTC().Format("15:04:05.000")+"  "+line)
		}
	}
	return nil
}

// historyLine is one event in a line, or "" for the workflow task events
// an operator does not need.
func historyLine(ev *history.HistoryEvent) string {
	name := ev.GetEventType().String()
	summary := payloadText(ev.GetUserMetadata().GetSummary())
	switch ev.GetEventType() {
	case enums.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, enums.EVENT_TYPE_WORKFLOW_TASK_STARTED, enums.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
		return ""
	}
	switch {
	case ev.GetActivityTaskScheduledEventAttributes() != nil:
		return name + " " + ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() + ": " + summary
	case ev.GetMarkerRecordedEventAttributes() != nil:
		return name + " " + ev.GetMarkerRecordedEventAttributes().GetMarkerName() + " " + summary
	case ev.GetActivityTaskFailedEventAttributes() != nil:
		return name + ": " + ev.GetActivityTaskFailedEventAttributes().GetFailure().GetMessage()
	case ev.GetWorkflowExecutionFailedEventAttributes() != nil:
		return name + ": " + ev.GetWorkflowExecutionFailedEventAttributes().GetFailure().GetMessage()
	}
	return name
}

func jsonOrNil(b []byte) json.RawMessage {
	if json.Valid(b) {
		return b
	}
	return nil
}

func printInspection(env *Env, in inspection) {
	w := env.Stdout
	fmt.Fprintf(w, "intent %s / %s\n", in.TenantID, in.Key)
	if r := in.Record; r != nil {
		fmt.Fprintf(w, "record      %s  %s  attempts %d  created %s  updated %s  expires %s\n", r.Status, r.BizType, r.Attempts,
			r.CreatedAt.UTC().Format(time.RFC3339), r.UpdatedAt.UTC().Format(time.RFC3339), r.ExpireAt.UTC().Format(time.RFC3339))
		fmt.Fprintf(w, "fingerprint %s\n", r.Fingerprint)
		if r.HTTPStatus != 0 {
			fmt.Fprintf(w, "answer      %d %s\n", r.HTTPStatus, r.Answer)
		}
		if r.Error != "" {
			fmt.Fprintf(w, "error       %s\n", r.Error)
		}
	}
	if r := in.Row; r != nil {
		fmt.Fprintf(w, "row         %s written by %s\n", r.BizType, r.WorkflowID)
	}
	for _, d := range in.Details {
		fmt.Fprintf(w, "detail      %s\n", d)
	}
	if r := in.Workflow; r != nil {
		fmt.Fprintf(w, "workflow    %s  %s\n", r.ID, r.Status)
		if r.Summary != "" {
			fmt.Fprintf(w, "summary     %s\n", r.Summary)
		}
		for _, h := range r.History {
			fmt.Fprintf(w, "  %s\n", h)
		}
	}
	if in.UILink != "" {
		fmt.Fprintf(w, "web ui      %s\n", in.UILink)
	}
	for _, n := range in.Notes {
		fmt.Fprintf(w, "note        %s\n", n)
	}
}

// payloadText reads a summary payload (a JSON string) as its text.
func payloadText(p *commonpb.Payload) string {
	var s string
	if p == nil || json.Unmarshal(p.GetData(), &s) != nil {
		return string(p.GetData())
	}
	return s
}
