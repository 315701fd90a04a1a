// Command idemflow runs idemflow: the dev stack, the worker, the gateway and
// the operator commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemflow/idemflow/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
