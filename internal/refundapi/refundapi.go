// Package refundapi is a small refunds API with its own store: the
// service an HTTP tool calls, in idemflow's tests, chaos and the demo's
// billing service, and, through the test kit (idemflowtest/downstream),
// in a team's tests of its tools file. It fails the ways real services
// do, on demand: it drops the connection after committing, answers after
// the caller gave up, or fails with a 5xx.
//
// It serves the two kinds of API a tool is declared for:
//   - POST /keyed/refunds deduplicates by the Idempotency-Key header, as
//     Stripe does: the same key answers the first answer again, marked
//     Idempotent-Replayed: true, and other parameters under it are a 422;
//   - POST /plain/refunds ignores that header and stores the body's
//     external_id, which GET /plain/refunds?external_id= looks up (200 with
//     the refund, 404 for none); a second POST is a second refund.
//
// GET /refunds lists every refund made: what tests and chaos count.
package refundapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"
)

// Fault is what the server does to one POST.
type Fault int

// The faults.
const (
	None Fault = iota
	// Drop commits the refund, then closes the connection unanswered.
	Drop
	// Late commits the refund, then answers after Server.Late, when the
	// caller has given up.
	Late
	// Fail answers 503 and commits nothing.
	Fail
	// Slow waits Server.Late before it commits, then answers: a request
	// still running when its caller has given up, and looked it up. It is
	// only ever injected (Random never draws it): it is the case a lookup
	// cannot see (README, HTTP tools).
	Slow
)

func (f Fault) String() string {
	return [...]string{"none", "drop", "late", "fail", "slow"}[f]
}

// Refund is one effect.
type Refund struct {
	ID             string `json:"id"`
	PaymentID      string `json:"payment_id"`
	AmountCents    int64  `json:"amount_cents"`
	ExternalID     string `json:"external_id,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Status         string `json:"status"`
}

// MaxAmount: a larger refund is rejected (422), as a refund above what was
// captured would be.
const MaxAmount = 1_000_000

type keyed struct {
	body []byte // the request, to tell a reuse with other parameters
	reply
}

// reply is an answer: its status, body and media type, and whether it is
// a stored answer given again.
type reply struct {
	status      int
	body        []byte
	contentType string
	replayed    bool
}

// Server is the service. The zero value is not ready: use New.
type Server struct {
	// Late is how long a Late answer waits (default 2 s).
	Late time.Duration
	// Token, if set, is the bearer token every request must carry (401
	// otherwise), as a real service's would.
	Token string
	// Accepted answers a refund 202 (queued) instead of 201, as an API
	// that takes work to do later does.
	Accepted bool
	// Text answers a refund as text/plain instead of JSON.
	Text bool
	// RepeatedKey, if set, is the keyed API's answer status to a key it
	// has seen (409 or 422, as some APIs answer a duplicate) instead of
	// the first answer again.
	RepeatedKey int
	// ReplaysRefusals makes the keyed API store a refusal of the call
	// (the 422 of a refund above the capture) as it stores a refund, and
	// answer it again to the same key, as an API that stores every answer
	// does. Without it a refused key is free to be sent afresh.
	ReplaysRefusals bool

	mu      sync.Mutex
	refunds []Refund
	keys    map[string]*keyed
	queue   []Fault
	rate    float64
	rng     *rand.Rand
	posts   int
	faulted map[Fault]int
}

// New returns an empty server with no faults.
func New() *Server {
	return &Server{keys: map[string]*keyed{}, faulted: map[Fault]int{}, Late: 2 * time.Second}
}

// Inject queues faults for the next POSTs, one each, in order.
func (s *Server) Inject(f ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, f...)
}

// Random gives each POST past the queue a fault with probability rate,
// drawn from seed (Drop, Late and Fail alike).
func (s *Server) Random(rate float64, seed uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rate, s.rng = rate, rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Refunds lists every refund made, in order.
func (s *Server) Refunds() []Refund {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Refund(nil), s.refunds...)
}

// Effects counts the refunds made under key: as their Idempotency-Key or
// their external_id.
func (s *Server) Effects(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.refunds {
		if r.IdempotencyKey == key || r.ExternalID == key {
			n++
		}
	}
	return n
}

// Posts counts the POSTs received.
func (s *Server) Posts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.posts
}

// Faulted counts the POSTs that got each fault.
func (s *Server) Faulted() map[Fault]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[Fault]int{}
	for f, n := range s.faulted {
		out[f] = n
	}
	return out
}

// Handler serves the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /keyed/refunds", s.postKeyed)
	mux.HandleFunc("POST /plain/refunds", s.postPlain)
	mux.HandleFunc("GET /plain/refunds", s.lookup)
	mux.HandleFunc("GET /refunds", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, s.Refunds()) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.Token != "" && r.Header.Get("Authorization") != "Bearer "+s.Token {
			writeJSON(w, 401, map[string]string{"error": "a valid bearer token is required"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// Serve serves on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}

// next picks the fault of a POST.
func (s *Server) next() Fault {
	s.posts++
	f := None
	switch {
	case len(s.queue) > 0:
		f, s.queue = s.queue[0], s.queue[1:]
	case s.rng != nil && s.rng.Float64() < s.rate:
		f = Fault(1 + s.rng.IntN(3))
	}
	if f != None {
		s.faulted[f]++
	}
	return f
}

type request struct {
	PaymentID   string `json:"payment_id"`
	AmountCents int64  `json:"amount_cents"`
	ExternalID  string `json:"external_id"`
	Reason      string `json:"reason"`
}

func decode(w http.ResponseWriter, r *http.Request) (request, []byte, bool) {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, 1<<16)); err != nil {
		writeJSON(w, 400, map[string]string{"error": err.Error()})
		return request{}, nil, false
	}
	var req request
	if err := json.Unmarshal(buf.Bytes(), &req); err != nil || req.PaymentID == "" || req.AmountCents <= 0 {
		writeJSON(w, 400, map[string]string{"error": "send payment_id and a positive amount_cents"})
		return request{}, nil, false
	}
	return req, buf.Bytes(), true
}

// refund makes the effect, under s.mu: the answer, or a rejection.
func (s *Server) refund(req request, key string) reply {
	if req.AmountCents > MaxAmount {
		return jsonReply(422, map[string]string{"error": "amount_exceeds_capture", "detail": fmt.Sprintf("at most %d cents can be refunded", MaxAmount)})
	}
	rf := Refund{ID: fmt.Sprintf("re_%d", len(s.refunds)+1), PaymentID: req.PaymentID, AmountCents: req.AmountCents,
		ExternalID: req.ExternalID, IdempotencyKey: key, Status: "succeeded"}
	status := http.StatusCreated
	if s.Accepted {
		rf.Status, status = "queued", http.StatusAccepted
	}
	s.refunds = append(s.refunds, rf)
	if s.Text {
		return reply{status: status, body: fmt.Appendf(nil, "refund %s of %d cents: %s", rf.ID, rf.AmountCents, rf.Status), contentType: "text/plain; charset=utf-8"}
	}
	return jsonReply(status, rf)
}

func jsonReply(status int, v any) reply {
	return reply{status: status, body: mustJSON(v), contentType: "application/json"}
}

func (s *Server) postKeyed(w http.ResponseWriter, r *http.Request) {
	req, body, ok := decode(w, r)
	if !ok {
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		writeJSON(w, 400, map[string]string{"error": "Idempotency-Key is required"})
		return
	}
	s.post(w, func() reply {
		k, seen := s.keys[key]
		switch {
		case seen && !bytes.Equal(k.body, body):
			return jsonReply(422, map[string]string{"error": "this key was used with other parameters"})
		case seen && s.RepeatedKey != 0:
			return jsonReply(s.RepeatedKey, map[string]string{"error": "duplicate request: this key was used before"})
		case !seen:
			k = &keyed{body: body, reply: s.refund(req, key)}
			if k.status < 300 || s.ReplaysRefusals {
				s.keys[key] = k
			}
			return k.reply
		}
		again := k.reply
		again.replayed = true
		return again
	})
}

func (s *Server) postPlain(w http.ResponseWriter, r *http.Request) {
	req, _, ok := decode(w, r)
	if !ok {
		return
	}
	if req.ExternalID == "" {
		writeJSON(w, 400, map[string]string{"error": "external_id is required"})
		return
	}
	s.post(w, func() reply { return s.refund(req, "") })
}

// post picks a POST's fault, makes its effect with commit under s.mu
// (none for Fail) and answers as the fault says.
func (s *Server) post(w http.ResponseWriter, commit func() reply) {
	s.mu.Lock()
	fault := s.next()
	if fault == Slow {
		s.mu.Unlock()
		time.Sleep(s.Late)
		s.mu.Lock()
	}
	if fault == Fail {
		s.mu.Unlock()
		writeJSON(w, 503, map[string]string{"error": "unavailable"})
		return
	}
	r := commit()
	s.mu.Unlock()
	answer(w, fault, s.Late, r)
}

func (s *Server) lookup(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("external_id")
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rf := range s.refunds {
		if id != "" && rf.ExternalID == id {
			writeJSON(w, 200, rf)
			return
		}
	}
	writeJSON(w, 404, map[string]string{"error": "no refund with this external_id"})
}

// answer sends a committed effect's answer, or fails to, as fault says.
func answer(w http.ResponseWriter, fault Fault, late time.Duration, r reply) {
	switch fault {
	case Drop:
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	case Late:
		time.Sleep(late)
	}
	w.Header().Set("Content-Type", r.contentType)
	if r.replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(mustJSON(v))
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
