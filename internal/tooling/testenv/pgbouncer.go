package testenv

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/devserver"
)

// pgbouncerBin is where Debian's pgbouncer package puts the server
// (/usr/sbin, which a non-root PATH may lack).
const pgbouncerBin = "/usr/sbin/pgbouncer"

// PgBouncer starts Debian's PgBouncer in front of the PostgreSQL server of
// serverURL (a database's URL or the admin URL), pooling in mode ("transaction" or "session"), as most hosted
// PostgreSQL and RDS Proxy do, with the package's defaults otherwise (no
// prepared-statement support: max_prepared_statements came in 1.21). It
// returns serverURL with its host and port moved to PgBouncer's; any
// database of the server is reachable through it. It stops when the test
// ends. A machine without the package fails the test: scripts/test.sh
// installs it.
func PgBouncer(t testing.TB, serverURL, mode string) string {
	t.Helper()
	if _, err := os.Stat(pgbouncerBin); err != nil {
		t.Fatalf("PgBouncer is not installed (scripts/test.sh installs Debian's pgbouncer): %v", err)
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	port := FreePort(t)
	users := filepath.Join(dir, "users.txt")
	if err := os.WriteFile(users, []byte(fmt.Sprintf("%q \"\"\n", u.User.Username())), 0o644); err != nil {
		t.Fatal(err)
	}
	// auth_type trust: the test server trusts loopback, and PgBouncer
	// logs in as the client's user. server_reset_query is PgBouncer's
	// default (DISCARD ALL), which only session pooling runs.
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
max_client_conn = 1000
default_pool_size = 20
`, u.Hostname(), u.Port(), port, users, mode)
	conf := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(conf, []byte(ini), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(pgbouncerBin, conf)
	// PgBouncer refuses to run as root: as the PostgreSQL package's user.
	if os.Geteuid() == 0 {
		cred, err := devserver.PostgresUser()
		if err != nil {
			t.Fatal(err)
		}
		if err := devserver.ChownTree(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("pgbouncer's log:\n%s", printed(dir))
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(15 * time.Second); ; {
		select {
		case err := <-exited:
			t.Fatalf("pgbouncer exited: %v\n%s", err, printed(dir))
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer did not listen on %s within 15 s: %v\n%s", addr, err, printed(dir))
		}
		time.Sleep(50 * time.Millisecond)
	}
	u.Host = addr
	return u.String()
}

// printed is the last 4 kB of what the PgBouncer in dir logged.
func printed(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "stderr"))
	return string(b[max(0, len(b)-4000):])
}
