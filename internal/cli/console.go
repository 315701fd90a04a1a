package cli

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/term"
)

// console is a terminal shared by log lines and one progress bar. A bar
// redraws its line in place (\r) and leaves it unfinished; a log line
// written then would continue that line. console clears the bar's line
// before a log line, and the bar redraws at its next update, so that the
// two never share a line.
type console struct {
	mu    sync.Mutex
	w     io.Writer
	dirty bool // the bar's line is drawn and unfinished
}

func newConsole(w io.Writer) *console { return &console{w: w} }

// Write writes log lines.
func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dirty {
		if _, err := io.WriteString(c.w, "\r\x1b[K"); err != nil {
			return 0, err
		}
		c.dirty = false
	}
	return c.w.Write(p)
}

// bar is the writer a progress bar draws with.
func (c *console) bar() io.Writer { return barWriter{c} }

type barWriter struct{ c *console }

func (b barWriter) Write(p []byte) (int, error) {
	b.c.mu.Lock()
	defer b.c.mu.Unlock()
	n, err := b.c.w.Write(p)
	if len(p) > 0 {
		b.c.dirty = !bytes.HasSuffix(p, []byte("\n"))
	}
	return n, err
}

// progressOn is the writer a progress bar draws on w with: w on a
// terminal, nil (no bar) elsewhere, where its in-place redraws would
// fill a log or a pipe with \r and ESC[K.
func progressOn(w io.Writer) io.Writer {
	if !isTerminal(w) {
		return nil
	}
	return w
}

// isTerminal reports whether w is a person's terminal, not a pipe, a file
// or /dev/null (a character device too, which a mode check would take).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// devConsole sets up dev's logging. On a terminal, a person reads the
// console: it shows what is at the log level and above except the one line
// per request, which is logged at DEBUG, and everything, requests
// included, also goes to dataDir/dev.log (a 17 s bench once added 10,469
// request lines to the console). Elsewhere (a pipe, CI, a service manager)
// the log is the whole story and stays as it is. It returns the logger,
// the writer for a progress bar, the request log level and a closer.
func devConsole(stderr io.Writer, dataDir string) (*slog.Logger, io.Writer, slog.Level, func(), error) {
	return devLogging(stderr, dataDir, isTerminal(stderr))
}

func devLogging(stderr io.Writer, dataDir string, terminal bool) (*slog.Logger, io.Writer, slog.Level, func(), error) {
	con := newConsole(stderr)
	text := slog.NewTextHandler(con, &slog.HandlerOptions{Level: logLevel()})
	if !terminal {
		// No bar: redrawn in place, it would put \r and ESC[K among the
		// log's lines; the log says what the bar would.
		return slog.New(text), nil, slog.LevelInfo, func() {}, nil
	}
	path := filepath.Join(dataDir, "dev.log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, 0, nil, fmt.Errorf("dev log: %w", err)
	}
	file := slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})
	logger := slog.New(slog.NewMultiHandler(text, file))
	logger.Info("each request is logged to the file, not here", "file", path)
	return logger, con.bar(), slog.LevelDebug, func() { _ = f.Close() }, nil
}
