package cli

import (
	"testing"

	"github.com/idemflow/idemflow/starter"
)

// Without read and write timeouts a slow client holds a connection for
// ever; the gateway's write timeout must outlast the longest wait.
func TestHTTPServersHaveTimeouts(t *testing.T) {
	gw := newHTTPServer(nil, false)
	if gw.ReadTimeout <= 0 || gw.IdleTimeout <= 0 || gw.ReadHeaderTimeout <= 0 || gw.WriteTimeout <= starter.MaxWait {
		t.Fatalf("gateway server: %+v", gw)
	}
	mcp := newHTTPServer(nil, true)
	if mcp.ReadTimeout <= 0 || mcp.IdleTimeout <= 0 || mcp.WriteTimeout != 0 {
		t.Fatalf("MCP server (streams events): %+v", mcp)
	}
}
