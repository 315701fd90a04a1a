package cli

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Seen in dev: "[....] 0/20time=… level=INFO msg=http …", a log line
// written after the demo's progress bar on the bar's own line. The console
// clears the bar's line first.
func TestALogLineNeverContinuesAProgressBarsLine(t *testing.T) {
	var term bytes.Buffer
	con := newConsole(&term)
	logger := slog.New(slog.NewTextHandler(con, nil))
	_, _ = con.bar().Write([]byte("\r[....] 0/20"))
	logger.Info("reconcile ran")
	_, _ = con.bar().Write([]byte("\r[##..] 10/20"))
	_, _ = con.bar().Write([]byte("\r[####] 20/20\n"))
	logger.Info("after the bar")
	out := term.String()
	if !strings.Contains(out, "0/20\r\x1b[Ktime=") {
		t.Fatalf("the log line was not put on a line of its own:\n%q", out)
	}
	if strings.Contains(out, "20/20\n\r\x1b[K") {
		t.Fatalf("a finished bar's line was cleared:\n%q", out)
	}
}

// Off a terminal (a pipe, CI), dev logs as before: every request at INFO,
// and no dev.log.
func TestDevLogsRequestsAtInfoOffATerminal(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, bar, level, closeLog, err := devConsole(f, dir)
	if err != nil {
		t.Fatal(err)
	}
	closeLog()
	if level != slog.LevelInfo {
		t.Fatalf("request level %v off a terminal", level)
	}
	// A bar redrawn in place (\r, ESC[K) off a terminal shared the log's
	// lines (issue #57): there is none.
	if bar != nil {
		t.Fatalf("a progress bar is drawn off a terminal: %T", bar)
	}
	if progressOn(f) != nil {
		t.Fatal("progressOn gives a bar off a terminal")
	}
	if _, err := os.Stat(filepath.Join(dir, "dev.log")); !os.IsNotExist(err) {
		t.Fatalf("dev.log written off a terminal: %v", err)
	}
}

// On a terminal the console keeps what a person reads; the requests go to
// dev.log, with everything else.
func TestDevOnATerminalLogsRequestsToItsFile(t *testing.T) {
	dir := t.TempDir()
	var term bytes.Buffer
	logger, _, level, closeLog, err := devLogging(&term, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	logger.Log(t.Context(), level, "http", "path", "/v1/tickets")
	logger.Info("temporal server running")
	closeLog()
	file, err := os.ReadFile(filepath.Join(dir, "dev.log"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(term.String(), "msg=http") || !strings.Contains(term.String(), "temporal server running") ||
		!strings.Contains(term.String(), "dev.log") {
		t.Fatalf("console:\n%s", term.String())
	}
	if !strings.Contains(string(file), "msg=http") || !strings.Contains(string(file), "temporal server running") {
		t.Fatalf("dev.log:\n%s", file)
	}
}

// dev with stderr sent to /dev/null is not on a terminal: /dev/null is a
// character device, which a file-mode check took for one.
func TestDevNullIsNotATerminal(t *testing.T) {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Fatal("/dev/null was taken for a terminal")
	}
}
