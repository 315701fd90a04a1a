package idem

import (
	"context"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// A statement's error that says its pooled connection was gone is sent
// again elsewhere (Claim); a refusal of the statement, a timeout, or a
// failure to open a connection at all is not.
func TestConnectionLostIsADeadConnectionOnly(t *testing.T) {
	// A real failure to connect (nothing listens on port 1): a
	// *pgconn.ConnectError around the dial's *net.OpError.
	_, refused := pgconn.Connect(context.Background(), "postgres://u@127.0.0.1:1/db?connect_timeout=2")
	if refused == nil {
		t.Fatal("a connection to port 1 succeeded")
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{io.EOF, true},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{&net.OpError{Op: "write", Err: syscall.EPIPE}, true},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, true},
		{&pgconn.PgError{Code: "57P01"}, true},
		{&pgconn.PgError{Code: "57P02"}, true},
		{&pgconn.PgError{Code: "23505"}, false},
		{&pgconn.PgError{Code: "40001"}, false},
		{context.DeadlineExceeded, false},
		{context.Canceled, false},
		{refused, false},
	} {
		if got := ConnectionLost(c.err); got != c.want {
			t.Errorf("ConnectionLost(%#v) = %v, want %v", c.err, got, c.want)
		}
	}
}
