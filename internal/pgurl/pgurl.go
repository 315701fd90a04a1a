// Package pgurl opens single PostgreSQL connections from the URLs idemflow
// documents. Its one job: a URL that works for the pool works everywhere.
// pgxpool takes its own parameters (pool_max_conns and the other pool_*)
// out of the URL, while pgx.Connect sends every parameter it does not know
// to the server as a run-time setting, which the server refuses
// ("unrecognized configuration parameter"). So every single connection
// (LISTEN, migrations, the commands, the dev server's set-up) parses its
// URL as the pool does.
package pgurl

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ParseConfig parses url as pgxpool.ParseConfig does and returns the
// settings of one connection.
func ParseConfig(url string) (*pgx.ConnConfig, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	return pc.ConnConfig, nil
}

// Connect opens one connection to url, which may carry pool parameters.
func Connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cc, err := ParseConfig(url)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cc)
}
