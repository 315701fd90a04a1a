package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Pending is an intent the server has recorded and still runs: the
// operation that will hold its answer (Operation reads it).
type Pending struct {
	OperationID string
	// Owner: this request started the run (the server's 202). False when
	// it found another request's run of the key under way (409 in
	// progress): the answer is then that request's, a replay to this one.
	Owner bool
}

// Submit sends the intent as Do does, retrying what Do retries, but waits
// for no more than one answer that says the intent is recorded: the final
// answer (pending nil), or, while the intent still runs, its operation. A
// front end that hands its caller a handle (an MCP task) uses it: the
// handle is the operation, which any process can read later, so nothing
// waits in this one.
func (c *Client) Submit(ctx context.Context, in Intent) (Result, *Pending, error) {
	c.defaults()
	return c.sendUntilAnswered(ctx, in, true)
}

// pendingOf reads a still-running answer: idemflow's 202 (this request's
// run) or its 409 in progress (another's), each naming the operation.
func pendingOf(status int, act action, body []byte) *Pending {
	var named struct {
		OperationID string `json:"operation_id"`
	}
	_ = json.Unmarshal(body, &named)
	if named.OperationID == "" {
		return nil
	}
	switch {
	case act == actionPoll:
		return &Pending{OperationID: named.OperationID, Owner: true}
	case status == http.StatusConflict && problemType(body) == typeInProgress:
		return &Pending{OperationID: named.OperationID}
	}
	return nil
}

// typeInProgress is idemflow's 409: the key's run is under way.
const typeInProgress = "/problems/request-in-progress"

// Operation is an intent's record, as GET /v1/operations/{id} shows it.
type Operation struct {
	ID             string
	IdempotencyKey string
	// Status is processing, succeeded or failed.
	Status               string
	CreatedAt, UpdatedAt time.Time
	// Done: the record holds the intent's answer; Result and Err are
	// then that answer, judged as a replay of it would be (Err: a
	// rejection, or ErrUnfinished, a run that ended without an answer).
	Done   bool
	Result Result
	Err    error
}

// ReadOperation reads an intent's operation once. A tenant sees only its
// own: another's ID is ErrNotFound, as an unknown one is.
func (c *Client) ReadOperation(ctx context.Context, id string) (Operation, error) {
	c.defaults()
	actx, cancel := context.WithTimeout(ctx, c.AttemptTimeout)
	defer cancel()
	resp, body, err := c.send(actx, "", http.MethodGet, "/v1/operations/"+url.PathEscape(id), "", false, "", nil)
	if err != nil {
		return Operation{}, fmt.Errorf("read operation %s: %w", id, err)
	}
	if resp.StatusCode != http.StatusOK {
		return Operation{}, fmt.Errorf("read operation %s: %w", id, problemError(resp.StatusCode, body, false))
	}
	var view struct {
		OperationID    string    `json:"operation_id"`
		IdempotencyKey string    `json:"idempotency_key"`
		Status         string    `json:"status"`
		CreatedAt      time.Time `json:"created_at"`
		UpdatedAt      time.Time `json:"updated_at"`
	}
	if err := json.Unmarshal(body, &view); err != nil {
		return Operation{}, fmt.Errorf("read operation %s: %w", id, err)
	}
	op := Operation{ID: view.OperationID, IdempotencyKey: view.IdempotencyKey, Status: view.Status, CreatedAt: view.CreatedAt, UpdatedAt: view.UpdatedAt}
	res, act, err := judgeOperation(body)
	if act == actionPoll {
		return op, nil
	}
	if act == actionRetry {
		if !errors.As(err, new(*ProblemError)) {
			return Operation{}, fmt.Errorf("read operation %s: %w", id, err)
		}
		err = fmt.Errorf("%w: %w", ErrUnfinished, err)
	}
	op.Done, op.Result, op.Err = true, res, err
	return op, nil
}

// CancelOperation asks the server to stop an intent's run, as an
// operator's cancel does: the run settles its record as FAILED (nothing
// was written) or, when its effect was already committed, SUCCESS, in its
// own time (ReadOperation shows it). A run that had already ended is left
// as it was.
func (c *Client) CancelOperation(ctx context.Context, id string) error {
	c.defaults()
	actx, cancel := context.WithTimeout(ctx, c.AttemptTimeout)
	defer cancel()
	resp, body, err := c.send(actx, "", http.MethodPost, "/v1/operations/"+url.PathEscape(id)+"/cancel", "", false, "", nil)
	if err != nil {
		return fmt.Errorf("cancel operation %s: %w", id, err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("cancel operation %s: %w", id, problemError(resp.StatusCode, body, false))
	}
	return nil
}
