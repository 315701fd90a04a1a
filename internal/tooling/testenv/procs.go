package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Survivors lists the processes whose command line names dir and still
// run after within (Linux's /proc), as "PID COMMAND LINE", and SIGKILLs
// them: a test that finds some fails, and the next one gets its ports.
// Whatever a command starts under a directory of its own names it (a
// data directory, a configuration file), so this is what the command
// left behind.
func Survivors(dir string, within time.Duration) []string {
	var left []string
	for deadline := time.Now().Add(within); ; time.Sleep(time.Second) {
		if left = ProcessesNaming(dir); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, l := range left {
		pid, _ := strconv.Atoi(strings.Fields(l)[0])
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return left
}

// ProcessesNaming lists the live processes whose command line holds dir,
// as "PID COMMAND LINE".
func ProcessesNaming(dir string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(dir)) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i >= 0 && bytes.HasPrefix(st[i+1:], []byte(" Z")) {
				continue // ended, not yet reaped
			}
		}
		out = append(out, e.Name()+" "+string(bytes.TrimSpace(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))))
	}
	return out
}
