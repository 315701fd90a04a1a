package cli

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemflow/idemflow/internal/mcpserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// gatewayFlags locate a running gateway: flags, then environment, then the
// dev.env a running 'idemflow dev' leaves in its data directory.
type gatewayFlags struct {
	url, token, dataDir string
}

// Their variables are read by parseFlags, as every flag's are, never into
// a default that help would print: a token is a secret.
func (g *gatewayFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.url, "url", "", "gateway base URL; default: from the dev stack's dev.env (env IDEMFLOW_URL)")
	fs.StringVar(&g.token, "token", "", "API token; default: from dev.env (env IDEMFLOW_TOKEN)")
	fs.StringVar(&g.dataDir, "data-dir", "./.idemflow", "where 'idemflow dev' keeps dev.env (env IDEMFLOW_DATA_DIR)")
}

// resolve fills what is missing from dev.env.
func (g *gatewayFlags) resolve() (map[string]string, error) {
	env := readDevEnv(g.dataDir)
	if g.url == "" {
		g.url = env["IDEMFLOW_URL"]
	}
	if g.token == "" {
		g.token = env["IDEMFLOW_TOKEN"]
	}
	if g.url == "" || g.token == "" {
		return env, fmt.Errorf("%w: no gateway: set --url and --token (IDEMFLOW_URL, IDEMFLOW_TOKEN) or start 'idemflow dev' with --data-dir %s", errUsage, g.dataDir)
	}
	return env, nil
}

func readDevEnv(dataDir string) map[string]string {
	out := map[string]string{}
	f, err := os.Open(filepath.Join(dataDir, "dev.env"))
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			out[k] = v
		}
	}
	return out
}

func runMCP(ctx context.Context, env *Env, args []string) error {
	var g gatewayFlags
	fs := flags("mcp", env)
	g.register(fs)
	httpAddr := fs.String("http", "", "serve MCP over streamable HTTP on this address (e.g. 127.0.0.1:8090) instead of stdio; clients send their own bearer token")
	var httpOpts mcpserver.HTTPOptions
	fs.IntVar(&httpOpts.MaxSessionsPerTenant, "max-sessions", 64, "with --http: open MCP sessions one tenant may hold (env IDEMFLOW_MCP_MAX_SESSIONS)")
	fs.DurationVar(&httpOpts.IdleTimeout, "session-idle-timeout", 10*time.Minute, "with --http: close a session idle this long (env IDEMFLOW_MCP_IDLE_TIMEOUT)")
	fs.DurationVar(&httpOpts.VerifyTTL, "verify-ttl", mcpserver.DefaultVerifyTTL, "with --http: how long a verified token is trusted before the gateway is asked again; "+
		"a revoked token is refused within it (env IDEMFLOW_MCP_VERIFY_TTL)")
	fs.DurationVar(&httpOpts.VerifyGrace, "verify-grace", mcpserver.DefaultVerifyGrace, "with --http: how long a token the gateway verified stays good while the gateway gives no answer "+
		"(a partition); a token the gateway refuses is refused at once; 0 or less: no grace (env IDEMFLOW_MCP_VERIFY_GRACE)")
	callWait := fs.Duration("call-wait", 60*time.Second, "how long one tool call waits for its final answer; past it the model reads NO ANSWER YET, "+
		"which tells it to call again with the same key (env IDEMFLOW_MCP_CALL_WAIT)")
	taskWait := fs.Duration("task-wait", mcpserver.DefaultTaskWait, "for a client that takes MCP tasks: how long a call waits for its answer, in whole seconds, "+
		"before it is answered with a task (env IDEMFLOW_MCP_TASK_WAIT)")
	taskTTL := fs.Duration("task-ttl", mcpserver.DefaultTaskTTL, "how long a task can be read after its intent's first call; keep it within the records' retention (env IDEMFLOW_MCP_TASK_TTL)")
	var of oauthFlags
	of.register(fs, "MCP server (its URL, as clients are given it)")
	fs.StringVar(&httpOpts.GatewaySecret, "gateway-secret", "", "with --oauth-issuer: "+mcpSecretUsage)
	var toolsFile string
	registerTools(fs, &toolsFile)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	v, err := of.verifier("idemflow MCP server")
	if err != nil {
		return err
	}
	if v != nil && (*httpAddr == "" || httpOpts.GatewaySecret == "") {
		return fmt.Errorf("%w: --oauth-issuer serves MCP over --http, and needs --gateway-secret (IDEMFLOW_MCP_SECRET), the secret the gateway was given as --mcp-secret", errUsage)
	}
	if err := checkMCPSecret(httpOpts.GatewaySecret); err != nil {
		return err
	}
	httpOpts.OAuth, httpOpts.APITokensOff = v, v != nil && !of.apiTokens
	if _, err := g.resolve(); err != nil && (*httpAddr == "" || g.url == "") {
		return err
	}
	if toolsFile == "" {
		toolsFile = readDevEnv(g.dataDir)["IDEMFLOW_TOOLS"]
	}
	if err := env.useTools(toolsFile, false); err != nil {
		return err
	}
	if httpOpts.VerifyGrace <= 0 {
		httpOpts.VerifyGrace = -1 // HTTPOptions' zero is its default
	}
	if *callWait <= 0 {
		return fmt.Errorf("%w: --call-wait must be positive", errUsage)
	}
	if *taskWait < time.Second || *taskTTL <= 0 {
		return fmt.Errorf("%w: --task-wait must be at least 1s and --task-ttl positive", errUsage)
	}
	cfg := mcpserver.Config{BaseURL: g.url, Token: g.token, CallTimeout: *callWait, TaskWait: *taskWait, TaskTTL: *taskTTL, Operations: env.Set.Operations()}
	if *httpAddr != "" {
		// The line a user copies into a client's configuration: the URL
		// itself (any path serves MCP; "/" is the one to give).
		ready := func(addr net.Addr) {
			env.Logger.Info("MCP over streamable HTTP: point clients at this URL, with their own bearer token",
				"url", "http://"+addr.String()+"/", "gateway", g.url)
		}
		return serveHTTP(ctx, env.Logger, "MCP server", *httpAddr, newHTTPServer(mcpserver.HTTPHandler(cfg, httpOpts), true), ready)
	}
	// stdout carries the protocol; logs go to stderr.
	return mcpserver.New(cfg).Run(ctx, mcpserver.WithTasks(&mcp.StdioTransport{}))
}
