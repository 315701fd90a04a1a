//go:build !nodev

package cli_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/docs"
	"github.com/idemflow/idemflow/internal/tooling/testenv"
)

// readmeLines returns the command lines of the sh blocks of the README and
// of docs/, one per logical line (continuations joined, comments dropped),
// each with the variable assignments that stand alone before it in its
// block.
func readmeLines(t *testing.T) []string {
	t.Helper()
	files, err := docs.Files("../..")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, name := range files {
		lines = append(lines, shLines(t, name)...)
	}
	return lines
}

// notRun is the line a reader sees before a block no test can run, and
// why (internal/tooling/docs holds every block to having one or running).
var notRun = regexp.MustCompile(`^_Not run: (.+)_$`)

// shLines returns the command lines of one documentation file's sh blocks,
// but for a block whose line before says it is not run, and why (a
// Kubernetes cluster's commands): that is logged instead.
func shLines(t *testing.T, name string) []string {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines, assigns []string
	in, cur, prev := false, "", ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		before := prev
		if strings.TrimSpace(l) != "" {
			prev = l
		}
		switch {
		case strings.HasPrefix(l, "```sh") && notRun.MatchString(before):
			t.Logf("not run here (%s: %s)", filepath.Base(name), notRun.FindStringSubmatch(before)[1])
			in = false
			for sc.Scan() && !strings.HasPrefix(sc.Text(), "```") {
			}
			continue
		case strings.HasPrefix(l, "```sh"):
			in, assigns = true, nil
			continue
		case strings.HasPrefix(l, "```"):
			in = false
			continue
		case !in:
			continue
		}
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		l = strings.TrimSpace(l)
		if strings.HasSuffix(l, `\`) {
			cur += strings.TrimSuffix(l, `\`) + " "
			continue
		}
		cur += l
		if regexp.MustCompile(`^[A-Z_]+=\$\([^)]*\)$`).MatchString(cur) {
			assigns = append(assigns, cur)
		} else if cur != "" {
			lines = append(lines, strings.Join(append(append([]string(nil), assigns...), cur), "; "))
		}
		cur = ""
	}
	return lines
}

// longRunning commands serve, or measure for minutes: the test runs each
// for a while and holds it to having started (no usage error, no exit).
var longRunning = regexp.MustCompile(`bin/idemflow (serve|dev|worker|gateway|chaos|bench|mcp --http)\b`)

// Every command line the README and docs/ show runs as written, against a dev
// stack, from a directory laid out as a clone's: bin/idemflow, .idemflow/
// with dev.env and the demo token, and the rest of the clone linked in. Only the placeholders (…,
// example hosts, KEY) are replaced. Lines that need what this machine lacks
// (Docker) or that are the suite itself are named in the log, not run.
func TestEveryReadmeCommandLineRuns(t *testing.T) {
	_, dbURL := testenv.Pool(t)
	dropTemporalDatabases(t, dbURL)
	root := t.TempDir()
	data := filepath.Join(root, ".idemflow")
	temporalPort := testenv.FreePort(t)
	dev := startDev(t, dbURL, "--data-dir", data, "--http-addr", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		"--temporal-port", fmt.Sprint(temporalPort), "--ui-port", fmt.Sprint(testenv.FreePort(t)))
	dev.WaitUp(t, 3*time.Minute)
	devEnv := readEnvFile(t, filepath.Join(data, "dev.env"))
	wd, _ := os.Getwd()
	repo := filepath.Dir(filepath.Dir(wd))
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	// bin/idemflow is the real binary, built as scripts/run.sh builds it:
	// chaos starts its stack from its own executable, which must be
	// idemflow and not this test binary.
	build := exec.Command("go", "build", "-o", filepath.Join(root, "bin", "idemflow"), "./cmd/idemflow")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The rest of the clone as it is: the Python quickstart installs
	// ./clients/python, examples/python runs with the package's
	// environment (scripts/test.sh made it), and a Go framework's module
	// under clients/go builds against idemflow's (its replace names the
	// clone's root).
	entries, err := os.ReadDir(repo)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if name := e.Name(); name != "bin" && !strings.HasPrefix(name, ".") {
			if err := os.Symlink(filepath.Join(repo, name), filepath.Join(root, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The commands find the stack through dev.env alone, as a user's
	// shell would: none of the stack's variables is set.
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "IDEMFLOW_") && !strings.HasPrefix(k, "TEMPORAL_") && k != "DATABASE_URL" {
			env = append(env, kv)
		}
	}
	sh := func(line string, within time.Duration, extra ...string) (code int, out string, running bool) {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-c", line)
		cmd.Dir, cmd.Env = root, append(append([]string(nil), env...), extra...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
		cmd.WaitDelay = 30 * time.Second
		b, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(b), ctx.Err() != nil
	}

	// The README's inspect examples are about tenant acme's key: the
	// first-hour path makes acme a token (from dev.env) and sends one.
	const key = "ticket:create:acme:6f1c-readme"
	code, tok, _ := sh("bin/idemflow token --tenant acme", time.Minute)
	tok = strings.TrimSpace(tok)
	if code != 0 || !strings.HasPrefix(tok, "idf_") {
		t.Fatalf("token --tenant acme beside a dev stack: exit %d\n%s", code, tok)
	}
	if r := testenv.Do(t, devEnv["IDEMFLOW_URL"], testenv.Request{Path: "/v1/tickets", Token: tok, Key: key,
		Body: `{"customer_id":"c-1","title":"Printer on fire"}`}); r.Status != 201 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}

	// Values go into shell lines quoted: a URL's "&" would end a command.
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	replacer := strings.NewReplacer(
		"https://idemflow.example", devEnv["IDEMFLOW_URL"],
		"postgres://…", quote(devEnv["DATABASE_URL"]),
		"--token …", "--token "+devEnv["IDEMFLOW_TOKEN"],
		"temporal:7233", devEnv["TEMPORAL_ADDRESS"],
		"acme.a1b2c.tmprl.cloud:7233", devEnv["TEMPORAL_ADDRESS"],
		"TEMPORAL_NAMESPACE=acme.a1b2c", "TEMPORAL_NAMESPACE="+devEnv["TEMPORAL_NAMESPACE"],
		// An API key needs TLS, which a dev stack does not serve.
		"TEMPORAL_API_KEY=… ", "",
		"ticket:create:acme:6f1c…", key,
		" KEY ", " "+key+" ",
		"http://127.0.0.1:8080", devEnv["IDEMFLOW_URL"],
	)
	ran := 0
	for _, line := range readmeLines(t) {
		switch {
		case strings.Contains(line, "docker compose"):
			t.Logf("not run here (no Docker; TestComposeFileMatchesTheBinaryAndTheReadme checks the file): %s", line)
			continue
		case strings.HasPrefix(line, "scripts/"):
			t.Logf("not run here (the set-up commands; CI and the fresh-clone walk run them): %s", line)
			continue
		}
		line := replacer.Replace(line)
		if strings.Contains(line, "…") {
			t.Errorf("a placeholder the test does not fill: %s", line)
			continue
		}
		ran++
		t.Run(line, func(t *testing.T) {
			if longRunning.MatchString(line) {
				// Two minutes for chaos to build nothing and start its
				// stack is more than it needs; what matters is that the
				// line is accepted and starts.
				// Its own TMPDIR, which every stack it makes lives
				// under (chaos's, bench's): a short one, since sockets
				// are made in it.
				tmp, err := os.MkdirTemp("", "rl")
				if err != nil {
					t.Fatal(err)
				}
				defer os.RemoveAll(tmp)
				code, out, running := sh(line, 20*time.Second, "TMPDIR="+tmp)
				if !running && code != 0 {
					t.Fatalf("exit %d before it was stopped:\n%s", code, out)
				}
				// A Ctrl-C leaves nothing it started running: not a
				// member of its Patroni cluster, not the etcd the members
				// share.
				if left := testenv.Survivors(tmp, time.Minute); len(left) > 0 {
					t.Fatalf("still running a minute after the command was stopped:\n%s", strings.Join(left, "\n"))
				}
				return
			}
			code, out, _ := sh(line, 2*time.Minute)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			if strings.Contains(line, "inspect") && !strings.Contains(out, "Printer on fire") {
				t.Fatalf("inspect does not show the ticket:\n%s", out)
			}
		})
	}
	if ran < 10 {
		t.Fatalf("only %d README lines found: the extraction is broken", ran)
	}
}

// A sh block the reader is told is not run (and why) is not run; the
// others are, whatever follows them.
func TestShLinesLeaveOutOnlyABlockMarkedNotRun(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "doc.md")
	text := "Run this:\n\n```sh\necho one\n```\n\n_Not run: no cluster here._\n```sh\nkubectl apply -f x.yaml\n```\n\nAnd:\n\n```sh\necho two\n```\n"
	if err := os.WriteFile(doc, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := shLines(t, doc); strings.Join(got, "|") != "echo one|echo two" {
		t.Fatalf("shLines: %q", got)
	}
}
