package idem

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// scriptedDB answers each QueryRow with the next of its rows, and the
// last one after that.
type scriptedDB struct {
	Querier
	rows []pgx.Row
	n    int
}

func (d *scriptedDB) QueryRow(context.Context, string, ...any) pgx.Row {
	r := d.rows[min(d.n, len(d.rows)-1)]
	d.n++
	return r
}

type rowFunc func(dest ...any) error

func (f rowFunc) Scan(dest ...any) error { return f(dest...) }

// A switchover: the claim's row arrives (it inserted the record), then the
// server ends the connection (57P01) before the statement completes, and
// the claim sent again finds no server to connect to. Claim must say it
// failed: a zero record with no error was taken as a final answer with
// status 0, and the gateway panicked writing it (issue #55).
func TestAClaimWhoseConnectionDiedNeverAnswersAnEmptyRecord(t *testing.T) {
	_, refused := pgconn.Connect(context.Background(), "postgres://u@127.0.0.1:1/db?connect_timeout=2")
	if refused == nil {
		t.Fatal("a connection to port 1 succeeded")
	}
	db := &scriptedDB{rows: []pgx.Row{
		rowFunc(func(dest ...any) error {
			*dest[0].(*bool) = true // pgx scans the row before the statement's end reports the error
			return &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}
		}),
		rowFunc(func(...any) error { return refused }),
	}}
	s := NewStore(db, Retention{}, nil)
	c, err := s.Claim(context.Background(), ClaimParams{TenantID: "acme", Key: "k-1", BizType: "ticket.create", Fingerprint: "f", WorkflowID: "ticket/acme/k-1"})
	if err == nil {
		t.Fatalf("Claim = %+v with no error, after its connection died and no other could be opened", c)
	}
	if !errors.As(err, new(*pgconn.ConnectError)) {
		t.Fatalf("Claim: %v, want the connect error that ended it", err)
	}
}
