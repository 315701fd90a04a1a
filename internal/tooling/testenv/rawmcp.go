package testenv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// RawMCP speaks JSON-RPC to an MCP server over streamable HTTP by hand,
// in a session: the Go SDK's client has no tasks, and a task result is no
// CallToolResult.
type RawMCP struct {
	t       testing.TB
	url     string
	token   string
	session string
	id      int
}

// RPCError is a JSON-RPC error.
type RPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// DialMCP opens a session with the MCP server at url, as token's tenant.
func DialMCP(t testing.TB, url, token string) *RawMCP {
	t.Helper()
	c := &RawMCP{t: t, url: url, token: token}
	if _, e := c.Call("initialize", map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw", "version": "1"}}); e != nil {
		t.Fatalf("initialize: %+v", e)
	}
	c.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	return c
}

func (c *RawMCP) send(msg map[string]any) []byte {
	c.t.Helper()
	b, _ := json.Marshal(msg)
	req, _ := http.NewRequest(http.MethodPost, c.url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+c.token)
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	if s := resp.Header.Get("Mcp-Session-Id"); s != "" {
		c.session = s
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return body
	}
	var data []byte
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			data = []byte(d)
		}
	}
	return data
}

// Call sends one request and reads its result or error.
func (c *RawMCP) Call(method string, params any) (map[string]any, *RPCError) {
	c.t.Helper()
	c.id++
	raw := c.send(map[string]any{"jsonrpc": "2.0", "id": c.id, "method": method, "params": params})
	var out struct {
		Result map[string]any `json:"result"`
		Error  *RPCError      `json:"error"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Result == nil && out.Error == nil {
		c.t.Fatalf("%s: %q: %v", method, raw, err)
	}
	return out.Result, out.Error
}
