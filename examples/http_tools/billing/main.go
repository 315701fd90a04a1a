// Command billing is the demo downstream of examples/http_tools/tools.yaml:
// a refunds API with its own store (idemflowtest/downstream), on
// 127.0.0.1:9000. With --faults it drops connections after committing,
// answers late and fails with 503 at that rate, so that idemflow's retries
// are seen at work; GET /refunds lists every refund it made, to count.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idemflow/idemflow/idemflowtest/downstream"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "listen address")
	faults := flag.Float64("faults", 0, "share of POSTs that fail after or before committing (0 to 1)")
	late := flag.Duration("late", 6*time.Second, "how long a late answer waits (past the tools' 5s timeout)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, *faults, *late); err != nil {
		fmt.Fprintln(os.Stderr, "billing:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string, faults float64, late time.Duration) error {
	srv := downstream.New()
	srv.Late = late
	srv.Token = os.Getenv("BILLING_TOKEN")
	if faults > 0 {
		srv.Random(faults, uint64(time.Now().UnixNano()))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	slog.Info("billing listening", "url", "http://"+ln.Addr().String(), "faults", faults, "token_required", srv.Token != "")
	return srv.Serve(ctx, ln)
}
