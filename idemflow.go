// Package idemflow runs idemflow (serve, worker, gateway, migrate, dev,
// mcp and the operator commands) with a team's own declared operations
// beside the built-in ones: a team's program that calls Main is idemflow,
// serving and running its operations too. Declare them with package op.
package idemflow

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemflow/idemflow/internal/cli"
	"github.com/idemflow/idemflow/op"
)

// Main runs the command its arguments name, with ops, until SIGINT or
// SIGTERM, and exits with the command's code.
func Main(ops ...*op.Operation) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, os.Args[1:], os.Stdout, os.Stderr, ops...)
	stop()
	os.Exit(code)
}

// Run runs the command args names, with ops, and returns its exit code
// (0 done, 1 failed, 2 usage; audit 3, inspect 4).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, ops ...*op.Operation) int {
	return cli.Run(ctx, args, stdout, stderr, ops...)
}
