// Package roundtrip counts the round trips idemflow makes: to PostgreSQL
// at the protocol level (SQL reads every message a connection sends, so it
// sees what a pgx tracer does not: a pool's ping, the preparation of a
// statement new to a connection, a statement sent off the caller's path),
// and to Temporal by RPC (RPCs). A cost is measured in round trips, not in
// time: these machines are shared, and a network multiplies round trips.
package roundtrip

import (
	"context"
	"encoding/binary"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SQL keeps the round trips of the connections it dialed. A simple
// Query is one; so is a Sync, which ends an extended-protocol pipeline
// however many statements it carries, and a Flush, after which the client
// waits for what it flushed.
type SQL struct{ seen }

// Pool makes c's connections count on w.
func (w *SQL) Pool(c *pgxpool.Config) { w.Config(&c.ConnConfig.Config) }

// Config makes the connections of c count on w.
func (w *SQL) Config(c *pgconn.Config) {
	dial := c.DialFunc
	c.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &conn{Conn: nc, w: w, names: map[string]string{}}, nil
	}
}

// conn reads the messages written on one connection.
type conn struct {
	net.Conn
	w       *SQL
	started bool // past the startup message, which has no type byte
	buf     []byte
	names   map[string]string // prepared statements, by name
	sent    []string          // the statements since the last round trip
}

func (c *conn) Write(p []byte) (int, error) {
	c.read(p)
	return c.Conn.Write(p)
}

// Protocol codes of untyped messages after which another untyped one
// comes.
const (
	sslRequest    = 80877103
	gssEncRequest = 80877104
)

func (c *conn) read(p []byte) {
	c.buf = append(c.buf, p...)
	for {
		if !c.started {
			if len(c.buf) < 8 {
				return
			}
			n := int(binary.BigEndian.Uint32(c.buf))
			if len(c.buf) < n {
				return
			}
			code := binary.BigEndian.Uint32(c.buf[4:])
			c.started = code != sslRequest && code != gssEncRequest
			c.buf = c.buf[n:]
			continue
		}
		if len(c.buf) < 5 {
			return
		}
		n := 1 + int(binary.BigEndian.Uint32(c.buf[1:]))
		if len(c.buf) < n {
			return
		}
		c.message(c.buf[0], c.buf[5:n])
		c.buf = c.buf[n:]
	}
}

func (c *conn) message(typ byte, body []byte) {
	switch typ {
	case 'Q':
		var q pgproto3.Query
		if q.Decode(body) == nil {
			c.w.add(oneLine(q.String))
		}
	case 'P':
		var m pgproto3.Parse
		if m.Decode(body) == nil {
			c.names[m.Name] = m.Query
			c.sent = append(c.sent, "prepare "+oneLine(m.Query))
		}
	case 'B':
		var m pgproto3.Bind
		if m.Decode(body) == nil {
			c.sent = append(c.sent, oneLine(c.names[m.PreparedStatement]))
		}
	case 'S', 'H':
		c.w.add("[" + strings.Join(c.sent, "; ") + "]")
		c.sent = nil
	}
}

func oneLine(sql string) string { return strings.Join(strings.Fields(sql), " ") }
