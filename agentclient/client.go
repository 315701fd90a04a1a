// Package agentclient is the Go client agents use to call idemflow. Its one job
// is the part a server cannot do: make the idempotency key once per
// logical intent, persist it before the first call, and send that same key
// on every retry, including after the agent restarts.
package agentclient

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/gowebpki/jcs"
	"go.opentelemetry.io/otel/propagation"
)

// Result is an intent's final answer.
type Result struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`
	// Replayed: the server answered from an earlier execution.
	Replayed bool `json:"replayed"`
	// OperationID names the intent's record (the Operation-Id header),
	// when the server sent one.
	OperationID string `json:"operation_id,omitempty"`
	// Differed, on a replay of an intent keyed by its intent fields
	// (Intent.ByIntent), names what this request sent that differs from
	// the first answer (Idempotency-Differed): the answer holds what was
	// made.
	Differed []string `json:"differed,omitempty"`
}

// Attempt describes one HTTP attempt, for progress callbacks.
type Attempt struct {
	IntentID string
	Key      string
	N        int // 1-based
	Status   int // 0 when no answer arrived
	Err      error
	Replayed bool
	// Wait is the pause before the next attempt (0 after the last).
	Wait time.Duration
}

// Client calls an idemflow gateway.
type Client struct {
	BaseURL string
	Token   string
	// Tenant is put into generated keys, to make them readable in logs
	// and the Temporal UI; the server scopes keys by token regardless.
	Tenant string
	// Store keeps intents across restarts; NewIntent needs one, and Do
	// records final answers in it.
	Store IntentStore
	HTTP  *http.Client
	// AttemptTimeout bounds one HTTP attempt (default 10 s); the context
	// bounds the whole call.
	AttemptTimeout time.Duration
	// Backoff: capped exponential with full jitter between Initial and Max.
	Initial, Max time.Duration
	// Wait is sent as Prefer: wait=N (seconds); 0 leaves the server default
	// (5 s). Neither asks for more than what is left of the context's
	// deadline, less a second to read the 202 and poll: a caller's
	// deadline is a bound.
	Wait time.Duration
	// OnAttempt, if set, is called after every attempt.
	OnAttempt func(Attempt)

	// sleep is replaceable in tests, to observe delays without timing.
	sleep func(ctx context.Context, d time.Duration) error
	rand  func(n int64) int64
}

func (c *Client) defaults() {
	if c.HTTP == nil {
		c.HTTP = http.DefaultClient
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = 10 * time.Second
	}
	if c.Initial == 0 {
		c.Initial = 200 * time.Millisecond
	}
	if c.Max == 0 {
		c.Max = 5 * time.Second
	}
	if c.sleep == nil {
		c.sleep = sleepCtx
	}
	if c.rand == nil {
		c.rand = rand.Int64N
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// NewKey makes a key "<kind>:<tenant>:<uuid>", e.g.
// ticket:create:acme:6f1c…: readable in logs and the Web UI, unique by its
// UUID, and never reused for another intent.
func (c *Client) NewKey(kind string) string {
	tenant := c.Tenant
	if tenant == "" {
		tenant = "t"
	}
	return kind + ":" + tenant + ":" + uuid.NewString()
}

// NewIntent returns the intent stored under id, or creates one with a new
// key and stores it before returning. Call it once per logical intent,
// outside any retry loop; calling it again with the same id (after a
// restart, say) resumes the same intent with the same key.
func (c *Client) NewIntent(ctx context.Context, id, kind, method, path string, body any) (Intent, error) {
	c.defaults()
	if c.Store == nil {
		return Intent{}, errors.New("client: NewIntent needs a Store, or the key would not survive a restart")
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return Intent{}, fmt.Errorf("intent %s: encode body: %w", id, err)
	}
	if in, err := c.Store.Load(ctx, id); err == nil {
		if d := difference(in, method, path, raw); d != "" {
			hint := ""
			if in.Refused != nil {
				hint = " (its last answer refused the request before anything was recorded: ReviseIntent sends the corrected one under the same key)"
			}
			return Intent{}, fmt.Errorf("intent %s: %s%s: %w", id, d, hint, ErrIntentMismatch)
		}
		return in, nil
	} else if !errors.Is(err, ErrNoIntent) {
		return Intent{}, err
	}
	in := Intent{ID: id, Key: c.NewKey(kind), Method: method, Path: path, Body: raw, CreatedAt: time.Now().UTC()}
	if err := c.Store.Save(ctx, in); err != nil {
		return Intent{}, err
	}
	return in, nil
}

// ReviseIntent replaces the request of the intent stored under id, keeping
// its key, when the server refused the request before recording anything
// (a 400 for the body, 413 or 415): the README's "fix the body, same key".
// Any other intent may have been recorded under its key, so changing its
// request would be a reused key: that is ErrNotRevisable.
func (c *Client) ReviseIntent(ctx context.Context, id, method, path string, body any) (Intent, error) {
	c.defaults()
	if c.Store == nil {
		return Intent{}, errors.New("client: ReviseIntent needs a Store")
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return Intent{}, fmt.Errorf("intent %s: encode body: %w", id, err)
	}
	in, err := c.Store.Load(ctx, id)
	if err != nil {
		return Intent{}, fmt.Errorf("intent %s: %w", id, err)
	}
	switch {
	case in.Result != nil:
		return Intent{}, fmt.Errorf("intent %s has its final answer (HTTP %d): %w", id, in.Result.Status, ErrNotRevisable)
	case in.Refused == nil:
		return Intent{}, fmt.Errorf("intent %s was not refused as sent, so the server may have recorded it: %w", id, ErrNotRevisable)
	}
	in.Method, in.Path, in.Body, in.Refused = method, path, raw, nil
	if err := c.Store.Save(ctx, in); err != nil {
		return Intent{}, err
	}
	return in, nil
}

// difference says how a stored intent differs from a request, or "".
func difference(in Intent, method, path string, raw []byte) string {
	switch {
	case in.Method != method || in.Path != path:
		return fmt.Sprintf("stored %s %s, asked %s %s", in.Method, in.Path, method, path)
	case !sameJSON(in.Body, raw):
		return fmt.Sprintf("%s %s: stored body %s, asked body %s", method, path, clip(in.Body), clip(raw))
	}
	return ""
}

func clip(b []byte) string {
	if c, err := jcs.Transform(b); err == nil {
		b = c
	}
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// sameJSON compares two JSON texts by value, as RFC 8785 canonical forms:
// a store may keep the body as jsonb, which reorders members.
func sameJSON(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b) || string(a) == "null" || string(b) == "null"
	}
	ca, err1 := jcs.Transform(a)
	cb, err2 := jcs.Transform(b)
	return err1 == nil && err2 == nil && bytes.Equal(ca, cb)
}

// Do sends the intent until it has a final answer, a non-retryable error,
// or ctx ends. Every attempt carries the intent's key. It retries
// timeouts, connection errors, 409 in-progress (after Retry-After), 202
// (polling the operation), 429 and 5xx; it never retries 400, 401, 404,
// 413 or 422, which come back as typed errors.
func (c *Client) Do(ctx context.Context, in Intent) (Result, error) {
	c.defaults()
	if in.Result != nil {
		// The first answer, from the agent's own store: a replay, as the
		// server would mark it.
		res := *in.Result
		res.Replayed = true
		return res, nil
	}
	res, _, err := c.sendUntilAnswered(ctx, in, false)
	if err != nil {
		if refusedUnrecorded(err) && c.Store != nil && in.ID != "" {
			in.Refused = &res
			if serr := c.Store.Save(ctx, in); serr != nil {
				return Result{}, errors.Join(err, serr)
			}
		}
		return Result{}, err
	}
	if c.Store != nil && in.ID != "" {
		in.Result = &res
		if serr := c.Store.Save(ctx, in); serr != nil {
			return res, serr
		}
	}
	return res, nil
}

// sendUntilAnswered sends the intent until it has an answer, a
// non-retryable error, or ctx ends: the final answer (a 202's operation
// polled to its end), or, when handOut, the operation of an intent that
// still runs (Submit). Do and Submit share its retries and bounds.
func (c *Client) sendUntilAnswered(ctx context.Context, in Intent, handOut bool) (Result, *Pending, error) {
	if in.Origin == "" && in.Method != http.MethodGet {
		in.Origin = uuid.NewString()
	}
	// seen is the operation an answer last named as running, if any.
	var seen *Pending
	for n := 1; ; n++ {
		res, pending, wait, err := c.attempt(ctx, in, n, handOut)
		if pending != nil {
			return Result{}, pending, nil
		}
		if pe := (*PendingError)(nil); errors.As(err, &pe) {
			seen = &pe.Pending
			if isRetryable(pe.Err) {
				err = pe.Err // retried as before
			}
		}
		final := err == nil || !isRetryable(err)
		if !final {
			if wait == 0 {
				wait = c.backoff(n)
			}
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
				final = true
			}
		}
		if final {
			wait = 0
		}
		if c.OnAttempt != nil {
			c.OnAttempt(Attempt{IntentID: in.ID, Key: in.Key, N: n, Status: res.Status, Err: err, Replayed: res.Replayed, Wait: wait})
		}
		if final {
			if isRetryable(err) {
				err = fmt.Errorf("intent %s: %w before a final answer (last: %v)", in.ID, context.DeadlineExceeded, err)
				if seen != nil {
					err = &PendingError{Pending: *seen, Err: err}
				}
				return Result{}, nil, err
			}
			return res, nil, err
		}
		if serr := c.sleep(ctx, wait); serr != nil {
			err = fmt.Errorf("intent %s: gave up after %d attempts: %w (last: %w)", in.ID, n, serr, err)
			if seen != nil {
				err = &PendingError{Pending: *seen, Err: err}
			}
			return Result{}, nil, err
		}
	}
}

// refusedUnrecorded reports an answer given before the server recorded
// anything: idemflow's own 400 for the body or key, 413 or 415. An
// answer of the intent's own (Settled: a stored unstorable-input, a
// downstream's 400) was recorded under the first body.
func refusedUnrecorded(err error) bool {
	var pe *ProblemError
	if !errors.As(err, &pe) || pe.Settled {
		return false
	}
	switch pe.Status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return true
	}
	return false
}

// backoff is capped exponential backoff with full jitter: a random pause
// in [0, min(Max, Initial*2^(n-1))], so that agents retrying together
// spread out.
func (c *Client) backoff(n int) time.Duration {
	ceil := c.Initial << min(n-1, 20)
	if ceil > c.Max || ceil <= 0 {
		ceil = c.Max
	}
	return time.Duration(c.rand(int64(ceil) + 1))
}

// errRetryable marks failures another attempt may fix.
type retryableError struct{ err error }

func (e retryableError) Error() string { return e.err.Error() }
func (e retryableError) Unwrap() error { return e.err }

func isRetryable(err error) bool {
	var r retryableError
	return errors.As(err, &r)
}

// attempt makes one call; wait is a server-requested delay (Retry-After).
// When handOut, an answer that names the operation of an intent that
// still runs is handed out (pending) instead of polled or retried.
func (c *Client) attempt(ctx context.Context, in Intent, n int, handOut bool) (res Result, pending *Pending, wait time.Duration, err error) {
	actx, cancel := context.WithTimeout(ctx, c.AttemptTimeout)
	defer cancel()
	resp, body, err := c.send(actx, c.prefer(ctx), in.Method, in.Path, in.Key, in.ByIntent, in.Origin, in.Body)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, nil, 0, ctx.Err()
		}
		// A timeout is not a failure: the first call may have succeeded.
		return Result{}, nil, 0, retryableError{fmt.Errorf("attempt %d: %w", n, err)}
	}
	res, action, err := judge(resp.StatusCode, resp.Header, body)
	p := pendingOf(resp.StatusCode, action, body)
	if handOut {
		if p != nil {
			return Result{}, p, 0, nil
		}
		if action == actionPoll {
			// A 202 that names no operation: nothing to hand out.
			return Result{}, nil, 0, retryableError{fmt.Errorf("attempt %d: a 202 without an operation_id", n)}
		}
	}
	if action == actionPoll {
		out, err := c.poll(ctx, resp.Header.Get("Location"))
		if err != nil {
			if p != nil && ctx.Err() != nil {
				err = &PendingError{Pending: *p, Err: err}
			}
			return res, nil, 0, err
		}
		// The operation holds this request's own answer: its 202 said
		// the run it polled is the one it started, not an earlier one.
		out.Replayed = false
		return out, nil, 0, nil
	}
	if p != nil {
		// Another request's run, in progress: retried, and named if the
		// deadline ends first.
		err = &PendingError{Pending: *p, Err: err}
	}
	return res, nil, parseRetryAfter(resp.Header.Get("Retry-After")), err
}

// action is what an answer asks of the client.
type action int

const (
	actionDone  action = iota // the final answer, or a final error
	actionPoll                // idemflow's 202: follow Location
	actionRetry               // the same key again
)

// HeaderReplayed marks an answer as the intent's own, stored one: it is
// on every such answer, whatever its status, and on no answer of
// idemflow's about the request.
const HeaderReplayed = "Idempotent-Replayed"

// HeaderFingerprint: intent asks the gateway to compare a request on its
// operation's intent fields alone (Intent.ByIntent); HeaderDiffered names,
// on such a replay, what differed from the first answer.
const (
	HeaderFingerprint = "Idempotency-Fingerprint"
	HeaderDiffered    = "Idempotency-Differed"
)

// HeaderOrigin names one call of Do or Submit (Intent.Origin) on each of
// its attempts, so that the call whose attempt ran the intent is answered
// as its owner (Replayed false) even when only a later attempt's answer
// arrives.
const HeaderOrigin = "Idempotency-Origin"

// judge reads one answer to an intent (clients/testdata/answers.json is
// its table, shared with the other clients). An answer with
// Idempotent-Replayed is the intent's own, whatever its status: any 2xx is
// its success (a downstream's 202 too), a 4xx the operation's rejection
// (a downstream's too, never idemflow's refusal of the request), and a
// 5xx one that ended without an answer, to be sent again (but
// outcome-unknown, which is final). Without it, the answer is idemflow's
// about the request: 202 is still running, 409 in progress, 429 and 5xx
// are retried, and a 4xx is a refusal.
func judge(status int, h http.Header, body []byte) (Result, action, error) {
	settled := h.Get(HeaderReplayed) != ""
	res := Result{Status: status, Body: body, Replayed: h.Get(HeaderReplayed) == "true", OperationID: h.Get("Operation-Id")}
	if d := h.Get(HeaderDiffered); d != "" {
		for _, name := range strings.Split(d, ",") {
			res.Differed = append(res.Differed, strings.TrimSpace(name))
		}
	}
	switch {
	case status == http.StatusAccepted && !settled:
		return res, actionPoll, nil
	case status < 300:
		return res, actionDone, nil
	case problemType(body) == typeOutcomeUnknown && settled:
		return res, actionDone, problemError(status, body, true) // final, though a 502
	case !settled && status == http.StatusConflict && problemType(body) == typeInProgress,
		status == http.StatusTooManyRequests, status >= 500:
		return res, actionRetry, retryableError{problemError(status, body, settled)}
	}
	return res, actionDone, problemError(status, body, settled)
}

// operationView is the part of GET /v1/operations/{id} a poll reads.
type operationView struct {
	Status            string          `json:"status"`
	ResultStatus      int             `json:"result_status"`
	ResultContentType string          `json:"result_content_type"`
	Result            json.RawMessage `json:"result"`
	ResultBase64      []byte          `json:"result_base64"`
}

// judgeOperation reads a polled operation: still running (actionPoll), or
// its stored answer, judged as a replay of it would be. Its bytes are the
// replay's: result_base64 when the view has it, else result as written.
func judgeOperation(body []byte) (Result, action, error) {
	var op operationView
	if err := json.Unmarshal(body, &op); err != nil {
		return Result{}, actionRetry, retryableError{fmt.Errorf("operation: %w", err)}
	}
	if op.Status == "processing" {
		return Result{}, actionPoll, nil
	}
	answer := []byte(op.Result)
	if op.ResultBase64 != nil {
		answer = op.ResultBase64
	}
	h := http.Header{HeaderReplayed: {"true"}}
	return judge(op.ResultStatus, h, answer)
}

// poll follows a 202's Location until the operation is done.
func (c *Client) poll(ctx context.Context, location string) (Result, error) {
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, c.AttemptTimeout)
		resp, body, err := c.send(actx, c.prefer(ctx), http.MethodGet, location, "", false, "", nil)
		cancel()
		if err == nil && resp.StatusCode == http.StatusOK {
			if res, action, err := judgeOperation(body); action != actionPoll {
				// Done: its answer, as a replay would give it. One that
				// ended without an answer is retryable: the intent is
				// sent again with its key, as after a direct 5xx.
				return res, err
			}
		} else if ctx.Err() != nil {
			return Result{}, ctx.Err()
		} else if err == nil && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests {
			return Result{}, problemError(resp.StatusCode, body, false)
		}
		wait := c.backoff(n)
		if err == nil {
			if ra := parseRetryAfter(resp.Header.Get("Retry-After")); ra > 0 {
				wait = ra
			}
		}
		if err := c.sleep(ctx, wait); err != nil {
			return Result{}, err
		}
	}
}

// serverWait is how long the gateway holds an answer when a request
// sends no Prefer: wait (starter.DefaultWait).
const serverWait = 5 * time.Second

// prefer is the Prefer header a request under ctx sends: the client's
// Wait (none when it is 0: the server's 5 s), but never more than leaves a
// second before ctx's deadline to read the server's 202 and poll, so that
// the server's answer comes inside the caller's deadline (PreferWait).
func (c *Client) prefer(ctx context.Context) string {
	want := cmp.Or(c.Wait, serverWait)
	n := int(want / time.Second)
	if dl, ok := ctx.Deadline(); ok {
		n = PreferWait(n, time.Until(dl))
	}
	if c.Wait == 0 && time.Duration(n)*time.Second == want {
		return ""
	}
	return "wait=" + strconv.Itoa(n)
}

// PreferWait is what Prefer: wait=N asks for with left before the
// deadline: the configured wait (seconds), but never more than leaves a
// second after it to read the server's 202 and poll. Every client
// follows the same rule.
func PreferWait(configured int, left time.Duration) int {
	if left >= time.Duration(configured+1)*time.Second {
		return configured
	}
	return max(0, int(left/time.Second)-1)
}

func (c *Client) send(ctx context.Context, prefer, method, path, key string, byIntent bool, origin string, body []byte) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	// The caller's trace goes on: the gateway's spans for this intent
	// join it (nothing is sent when ctx carries no span).
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if byIntent {
		req.Header.Set(HeaderFingerprint, "intent")
	}
	if origin != "" {
		req.Header.Set(HeaderOrigin, origin)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if prefer != "" {
		req.Header.Set("Prefer", prefer)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, nil, err
	}
	return resp, b, nil
}

func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// Get reads a resource (GET path); it retries like Do.
func (c *Client) Get(ctx context.Context, path string) (Result, error) {
	return c.Do(ctx, Intent{Method: http.MethodGet, Path: path})
}
