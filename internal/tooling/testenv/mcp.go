package testenv

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCPSession connects a client to server in memory; both close when the
// test ends.
func MCPSession(t testing.TB, server *mcp.Server) *mcp.ClientSession {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// ToolSchema is the input schema of the session's tool name, as JSON; a
// tool the server does not list fails the test.
func ToolSchema(t testing.TB, cs *mcp.ClientSession, name string) []byte {
	t.Helper()
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(list.Tools, func(tl *mcp.Tool) bool { return tl.Name == name })
	if i < 0 {
		t.Fatalf("no %s tool", name)
	}
	schema, _ := json.Marshal(list.Tools[i].InputSchema)
	return schema
}

// ToolResult is the structured content of idemflow's tools
// (mcpserver.Result, read from its JSON: testenv cannot import mcpserver,
// whose client's own tests use testenv).
type ToolResult struct {
	HTTPStatus int            `json:"http_status"`
	Replayed   bool           `json:"replayed"`
	Result     map[string]any `json:"result"`
}

// CallTool calls the session's tool name with args: the result, and its
// structured content.
func CallTool(t testing.TB, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, ToolResult) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	var out ToolResult
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &out)
	return res, out
}
