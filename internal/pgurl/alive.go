package pgurl

import (
	"context"
	"crypto/tls"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// prepareConn hands out a pooled connection only if its socket still
// looks usable, and has the pool replace it otherwise (pgxpool's
// PrepareConn: false and no error). The pool does not ping a connection
// idle for less than IdlePing, so without this a connection the server
// ended while it sat idle (a restart, a failover, an operator's
// pg_terminate_backend) failed the first statement sent on it, whatever
// that was: a request's authentication answered 503. The server says
// goodbye before it closes (FATAL 57P01, then end of file), and that is
// in the socket's receive buffer by the time the connection is wanted
// again: a peek finds it with no round trip and no wait.
func prepareConn(_ context.Context, c *pgx.Conn) (bool, error) {
	return socketAlive(c.PgConn().Conn()), nil
}

// socketAlive reports whether an idle connection's socket has nothing to
// read and is not at end of file. An idle connection is owed nothing: a
// message waiting on it is the server's goodbye (or, harmlessly dropped,
// a parameter it reports changed). A socket it cannot inspect is taken as
// alive, as before.
func socketAlive(c net.Conn) bool {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	// Control, not Read: Read takes the socket's read lock, which
	// pgconn's background reader may hold on a released connection while
	// it waits for a byte that an idle connection never gets. Control
	// waits for nobody; the peek is non-blocking and takes no byte, so
	// it cannot disturb that reader either.
	alive := true
	if err := rc.Control(func(fd uintptr) { alive = peekNothing(fd) }); err != nil {
		return false
	}
	return alive
}
