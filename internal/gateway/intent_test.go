package gateway_test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// byIntent sends body under key as a caller that derived the key from
// the operation's intent fields (the integrations, the MCP wrappers).
func byIntent(s *testenv.Stack, tenantID, path, key, body string) testenv.Response {
	return s.Do(testenv.Request{Path: path, Token: s.Tokens[tenantID], Key: key, Body: body,
		Header: map[string]string{"Idempotency-Fingerprint": "intent"}})
}

// Seed 2's fingerprint over whitelisted, normalised fields: under a key
// derived from the intent fields, a model's rewording is a replay that
// says what differed, another value in an intent field is a conflict,
// while the record lives and after purge; a plain caller's key keeps the
// whole-body comparison.
func TestAKeyByIntentFieldsReplaysARewordingAndRefusesAnotherIntent(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	forgetAnswers(s)
	const first = `{"customer_id":"c-1","title":"Printer on fire","priority":"high"}`
	made := byIntent(s, testenv.TenantA, "/v1/tickets", "in-1", first)
	if made.Status != http.StatusCreated || made.Header.Get("Idempotent-Replayed") != "false" ||
		made.Header.Get("Idempotency-Fingerprint") != "intent" || made.Header.Get("Idempotency-Intent-Fields") != "customer_id" {
		t.Fatalf("first: %d %v %s", made.Status, made.Header, made.Body)
	}
	for _, purge := range []bool{false, true} {
		if purge {
			purgeRecords(t, s)
		}
		// The model wrote the call again in other words: the same ticket.
		again := byIntent(s, testenv.TenantA, "/v1/tickets", "in-1",
			`{"customer_id":" c-1 ","title":"The printer is smoking, please help","description":"Third floor.","priority":"high"}`)
		if again.Status != http.StatusCreated || !bytes.Equal(again.Body, made.Body) || again.Header.Get("Idempotent-Replayed") != "true" ||
			again.Header.Get("Idempotency-Differed") != "description, title" {
			t.Fatalf("reworded (purged %v): %d %v %s", purge, again.Status, again.Header, again.Body)
		}
		// Another customer under the key is another intent: refused.
		other := byIntent(s, testenv.TenantA, "/v1/tickets", "in-1", `{"customer_id":"c-2","title":"Printer on fire","priority":"high"}`)
		if other.Status != http.StatusUnprocessableEntity {
			t.Fatalf("another customer (purged %v): %d %s", purge, other.Status, other.Body)
		}
		assertProblem(t, other, "/problems/idempotency-key-reused")
		// The same key without the header is compared on the whole body,
		// which was never fingerprinted that way: a conflict, not a
		// replay of the wrong kind.
		plain := ticket(s, testenv.TenantA, "in-1", first)
		if plain.Status != http.StatusUnprocessableEntity {
			t.Fatalf("the key sent plain (purged %v): %d %s", purge, plain.Status, plain.Body)
		}
	}
	// A plain caller's own key: a changed body is a conflict, as ever.
	if r := ticket(s, testenv.TenantA, "plain-1", first); r.Status != http.StatusCreated {
		t.Fatalf("plain: %d %s", r.Status, r.Body)
	}
	if r := ticket(s, testenv.TenantA, "plain-1", `{"customer_id":"c-1","title":"Printer is smoking","priority":"high"}`); r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("plain, reworded: %d %s", r.Status, r.Body)
	}
	if n := countTickets(t, s); n != 2 {
		t.Fatalf("%d tickets, want 2 (in-1, plain-1)", n)
	}
}

// An order's intent is its customer, its lines in any order and its
// coupon; an action's is its order (and a payment's reference).
func TestAnOrdersIntentIsItsLinesInAnyOrder(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	const two = `{"customer_id":"c-1","items":[{"sku":"SKU-MOUSE","quantity":1},{"sku":"SKU-KEYBOARD","quantity":2}]}`
	made := byIntent(s, testenv.TenantA, "/v1/orders", "o-in", two)
	if made.Status != http.StatusCreated || made.Header.Get("Idempotency-Intent-Fields") != "customer_id, items, coupon_code" {
		t.Fatalf("order: %d %v %s", made.Status, made.Header, made.Body)
	}
	swapped := byIntent(s, testenv.TenantA, "/v1/orders", "o-in", `{"customer_id":"c-1","items":[{"sku":"SKU-KEYBOARD","quantity":2},{"sku":"SKU-MOUSE","quantity":1}]}`)
	if swapped.Status != http.StatusCreated || !bytes.Equal(swapped.Body, made.Body) || swapped.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("lines in another order: %d %s", swapped.Status, swapped.Body)
	}
	more := byIntent(s, testenv.TenantA, "/v1/orders", "o-in", `{"customer_id":"c-1","items":[{"sku":"SKU-MOUSE","quantity":3},{"sku":"SKU-KEYBOARD","quantity":2}]}`)
	if more.Status != http.StatusUnprocessableEntity {
		t.Fatalf("another quantity: %d %s", more.Status, more.Body)
	}
	no := orderNo(t, made)
	paid := s.Do(testenv.Request{Path: "/v1/orders/" + no + "/cancel", Token: s.Tokens[testenv.TenantA], Key: "c-in", Body: `{"reason":"ordered twice"}`,
		Header: map[string]string{"Idempotency-Fingerprint": "intent"}})
	again := s.Do(testenv.Request{Path: "/v1/orders/" + no + "/cancel", Token: s.Tokens[testenv.TenantA], Key: "c-in", Body: `{"reason":"a duplicate"}`,
		Header: map[string]string{"Idempotency-Fingerprint": "intent"}})
	if paid.Status != http.StatusOK || again.Status != http.StatusOK || !bytes.Equal(again.Body, paid.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("cancel reworded: %d %s / %d %s", paid.Status, paid.Body, again.Status, again.Body)
	}
	if n := testenv.Count(t, s.Pool, "purchase_order", ""); n != 1 {
		t.Fatalf("%d orders", n)
	}
}

// A value the contract does not list is a 400 naming the header, and
// nothing is recorded (Schemathesis sent "z" and "{}" and got a 201).
func TestAnUnknownFingerprintRuleIsA400NamingTheHeader(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{})
	for i, v := range []string{"z", "{}", "intent, body", " Body ", "INTENT"} {
		r := s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: fmt.Sprintf("fp-%d", i), Body: `{"customer_id":"c-1","title":"t"}`,
			Header: map[string]string{"Idempotency-Fingerprint": v}})
		if r.Status != http.StatusBadRequest || !bytes.Contains(r.Body, []byte("Idempotency-Fingerprint")) {
			t.Errorf("Idempotency-Fingerprint %q: %d %s", v, r.Status, r.Body)
		}
	}
	// The 400 names the body's faults too, as every 400 names them all.
	r := s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "fp-both", Body: `{"title":""}`,
		Header: map[string]string{"Idempotency-Fingerprint": "z"}})
	if r.Status != http.StatusBadRequest || !bytes.Contains(r.Body, []byte(`"field":"Idempotency-Fingerprint"`)) || !bytes.Contains(r.Body, []byte(`"field":"customer_id"`)) {
		t.Errorf("a bad rule and a bad body: %d %s", r.Status, r.Body)
	}
	if r := s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "fp-body", Body: `{"customer_id":"c-1","title":"t"}`,
		Header: map[string]string{"Idempotency-Fingerprint": "body"}}); r.Status != http.StatusCreated {
		t.Errorf("body: %d %s", r.Status, r.Body)
	}
	if n := countRecords(t, s); n != 1 {
		t.Fatalf("%d records, want 1 (the body one)", n)
	}
}

// The call that ran an intent names itself (Idempotency-Origin) on each
// of its retries: while the intent runs it is answered as its owner (202,
// where another caller gets 409), and once it is done with the answer as
// its own (Idempotent-Replayed: false), from the record and from the
// answer cache alike, while any other caller, with another origin or
// none, gets the replay. A record rebuilt after purge knows no origin.
// An origin that is not one UUID is a 400 naming the header, nothing
// recorded.
func TestTheCallThatRanTheIntentIsItsOwnerHoweverOftenItAsks(t *testing.T) {
	s := testenv.NewStack(t, testenv.Options{NoWorker: true})
	const body, mine, other = `{"customer_id":"c-origin","title":"t"}`, "0b7c9a52-5a0e-4c43-8c8f-0f6d2b1e9a44", "5d1e7f20-8c3b-4b7e-9a61-2f0c4d8e6b13"
	send := func(origin string, wait bool) testenv.Response {
		h := map[string]string{}
		if origin != "" {
			h["Idempotency-Origin"] = origin
		}
		if !wait {
			h["Prefer"] = "wait=0"
		}
		return s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "origin-1", Body: body, Header: h})
	}
	if r := send(mine, false); r.Status != http.StatusAccepted {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	if r := send(mine, false); r.Status != http.StatusAccepted {
		t.Fatalf("the same call again while it runs: %d %s, want 202 (its owner)", r.Status, r.Body)
	}
	if r := send(other, false); r.Status != http.StatusConflict {
		t.Fatalf("another call while it runs: %d %s, want 409", r.Status, r.Body)
	}
	s.StartWorker()
	want := map[string]string{mine: "false", other: "true", "": "true"}
	var first []byte
	for _, cached := range []bool{true, false} {
		if !cached {
			forgetAnswers(s)
		}
		for _, origin := range []string{mine, other, "", mine} {
			r := send(origin, true)
			if first == nil {
				first = r.Body
			}
			if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != want[origin] || !bytes.Equal(r.Body, first) {
				t.Fatalf("origin %q (answer cache %v): %d Idempotent-Replayed %q %s, want 201 %s and the first answer",
					origin, cached, r.Status, r.Header.Get("Idempotent-Replayed"), r.Body, want[origin])
			}
		}
	}
	purgeRecords(t, s)
	if r := send(mine, true); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after purge: %d %q, want the rebuilt record's replay", r.Status, r.Header.Get("Idempotent-Replayed"))
	}
	if n := countTickets(t, s); n != 1 {
		t.Fatalf("%d tickets", n)
	}
	before := countRecords(t, s)
	for i, v := range []string{"x", "0b7c9a52-5a0e-4c43-8c8f-0f6d2b1e9a4", "urn:uuid:0b7c9a52-5a0e-4c43-8c8f-0f6d2b1e9a44", "{0b7c9a52-5a0e-4c43-8c8f-0f6d2b1e9a44}", "0b7c9a52 5a0e-4c43-8c8f-0f6d2b1e9a44"} {
		r := s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: fmt.Sprintf("origin-bad-%d", i), Body: body,
			Header: map[string]string{"Idempotency-Origin": v}})
		if r.Status != http.StatusBadRequest || !bytes.Contains(r.Body, []byte("Idempotency-Origin")) {
			t.Errorf("Idempotency-Origin %q: %d %s", v, r.Status, r.Body)
		}
	}
	// The 400 names the body's faults too, as every 400 names them all
	// (Schemathesis found one that named only the header).
	r := s.Do(testenv.Request{Path: "/v1/tickets", Token: s.Tokens[testenv.TenantA], Key: "origin-both", Body: `{"title":""}`,
		Header: map[string]string{"Idempotency-Origin": "x", "Idempotency-Fingerprint": "z"}})
	for _, field := range []string{"Idempotency-Origin", "Idempotency-Fingerprint", "customer_id"} {
		if r.Status != http.StatusBadRequest || !bytes.Contains(r.Body, []byte(`"field":"`+field+`"`)) {
			t.Errorf("a bad origin, rule and body: %d %s, want %s named", r.Status, r.Body, field)
		}
	}
	if n := countRecords(t, s); n != before {
		t.Fatalf("%d records after the refused origins, want %d", n, before)
	}
}
