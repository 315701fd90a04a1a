package agentclient

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// answerVectors is clients/testdata/answers.json: how every client reads
// an answer. The TypeScript and Python clients' tests read it too.
type answerVectors struct {
	Answers []struct {
		Name    string            `json:"name"`
		Status  int               `json:"status"`
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
		Expect  expectation       `json:"expect"`
	} `json:"answers"`
	Operations []struct {
		Name   string          `json:"name"`
		View   json.RawMessage `json:"view"`
		Expect expectation     `json:"expect"`
	} `json:"operations"`
	Backoff []struct {
		InitialMS int   `json:"initial_ms"`
		MaxMS     int   `json:"max_ms"`
		Attempt   int   `json:"attempt"`
		CeilingMS int64 `json:"ceiling_ms"`
	} `json:"backoff"`
	PreferWait []struct {
		ConfiguredS int `json:"configured_s"`
		LeftMS      int `json:"left_ms"`
		WaitS       int `json:"wait_s"`
	} `json:"prefer_wait"`
}

type expectation struct {
	Action      string   `json:"action"`
	Replayed    *bool    `json:"replayed"`
	Error       string   `json:"error"`
	Code        string   `json:"code"`
	Revisable   *bool    `json:"revisable"`
	Fields      []string `json:"fields"`
	WaitMS      *int     `json:"wait_ms"`
	Status      int      `json:"status"`
	Body        string   `json:"body"`
	ContentType string   `json:"content_type"`
}

func readVectors(t *testing.T) answerVectors {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "clients", "testdata", "answers.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v answerVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Answers) == 0 || len(v.Operations) == 0 || len(v.Backoff) == 0 {
		t.Fatal("the vectors are empty")
	}
	return v
}

var errorNames = map[string]error{
	"invalid-request": ErrInvalidRequest, "unauthorized": ErrUnauthorized, "not-found": ErrNotFound,
	"too-large": ErrTooLarge, "key-reused": ErrKeyReused, "rejected": ErrRejected, "outcome-unknown": ErrOutcomeUnknown,
}

func (e expectation) check(t *testing.T, res Result, act action, err error, h http.Header) {
	t.Helper()
	got := map[action]string{actionDone: "success", actionPoll: "poll", actionRetry: "retry"}[act]
	if act == actionDone && err != nil {
		got = "fail"
	}
	if got != e.Action {
		t.Fatalf("action %s (err %v), want %s", got, err, e.Action)
	}
	if e.Replayed != nil && res.Replayed != *e.Replayed {
		t.Errorf("replayed %v, want %v", res.Replayed, *e.Replayed)
	}
	if e.Error != "" && !errors.Is(err, errorNames[e.Error]) {
		t.Errorf("error %v, want %s", err, e.Error)
	}
	var rej *RejectedError
	if e.Code != "" && (!errors.As(err, &rej) || rej.Code != e.Code) {
		t.Errorf("error %v, want a rejection coded %s", err, e.Code)
	}
	if e.Revisable != nil && refusedUnrecorded(err) != *e.Revisable {
		t.Errorf("revisable %v, want %v", refusedUnrecorded(err), *e.Revisable)
	}
	if e.Fields != nil {
		var pe *ProblemError
		var named []string
		if errors.As(err, &pe) {
			for _, f := range pe.Problem.Errors {
				named = append(named, f.Field)
			}
		}
		if !slices.Equal(named, e.Fields) {
			t.Errorf("the refusal's fields %v, want %v", named, e.Fields)
		}
	}
	if e.WaitMS != nil && parseRetryAfter(h.Get("Retry-After")) != time.Duration(*e.WaitMS)*time.Millisecond {
		t.Errorf("wait %s, want %d ms", parseRetryAfter(h.Get("Retry-After")), *e.WaitMS)
	}
	if e.Status != 0 && (res.Status != e.Status || string(res.Body) != e.Body) {
		t.Errorf("answer %d %q, want %d %q", res.Status, res.Body, e.Status, e.Body)
	}
}

// The shared table: every answer, polled operation and backoff ceiling
// the clients must read alike.
func TestTheSharedAnswerVectors(t *testing.T) {
	v := readVectors(t)
	for _, a := range v.Answers {
		t.Run(a.Name, func(t *testing.T) {
			h := http.Header{}
			for k, val := range a.Headers {
				h.Set(k, val)
			}
			res, act, err := judge(a.Status, h, []byte(a.Body))
			a.Expect.check(t, res, act, err, h)
		})
	}
	for _, o := range v.Operations {
		t.Run("operation "+o.Name, func(t *testing.T) {
			raw := []byte(o.View)
			var text string
			if json.Unmarshal(o.View, &text) == nil {
				raw = []byte(text) // a view given as its exact text
			}
			res, act, err := judgeOperation(raw)
			o.Expect.check(t, res, act, err, http.Header{})
			var view operationView
			_ = json.Unmarshal(raw, &view)
			if o.Expect.ContentType != "" && view.ResultContentType != o.Expect.ContentType {
				t.Errorf("content type %q, want %q", view.ResultContentType, o.Expect.ContentType)
			}
		})
	}
	for _, b := range v.Backoff {
		c := &Client{Initial: time.Duration(b.InitialMS) * time.Millisecond, Max: time.Duration(b.MaxMS) * time.Millisecond,
			rand: func(n int64) int64 { return n - 1 }}
		if got := c.backoff(b.Attempt); got != time.Duration(b.CeilingMS)*time.Millisecond {
			t.Errorf("backoff(%d) with %d..%d ms: ceiling %s, want %d ms", b.Attempt, b.InitialMS, b.MaxMS, got, b.CeilingMS)
		}
	}
	if len(v.PreferWait) == 0 {
		t.Fatal("no prefer_wait vectors")
	}
	for _, w := range v.PreferWait {
		if got := PreferWait(w.ConfiguredS, time.Duration(w.LeftMS)*time.Millisecond); got != w.WaitS {
			t.Errorf("PreferWait(%d s, %d ms left) = %d, want %d", w.ConfiguredS, w.LeftMS, got, w.WaitS)
		}
	}
}
