package devserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemflow/idemflow/internal/pgurl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultPrivatePort is where a private PostgreSQL listens (127.0.0.1 only),
// away from a system server's 5432.
const DefaultPrivatePort = 54329

// ErrNoPostgres: no server was reachable and no binaries are installed.
var ErrNoPostgres = errors.New("no PostgreSQL reachable and none installed: install it (Debian/Ubuntu: apt-get install postgresql) or set DATABASE_URL")

// Postgres is a PostgreSQL server the stack uses: an existing one, or a
// private one it started.
type Postgres struct {
	// AdminURL connects to the "postgres" database as a superuser.
	AdminURL string
	// Private is true when this process started the server.
	Private bool
	dir     string
	pgCtl   string
	port    int
	cred    *syscall.Credential
}

// localCandidates are tried before starting a private server: a machine's
// own PostgreSQL with trust authentication (as on CI and dev boxes).
var localCandidates = []string{
	"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable&connect_timeout=2",
}

// EnsurePostgres finds a reachable PostgreSQL or starts a private one in
// dataDir/postgres from the installed binaries.
func EnsurePostgres(ctx context.Context, dataDir string, port int, logger *slog.Logger) (*Postgres, error) {
	return ensurePostgres(ctx, dataDir, port, logger, localCandidates)
}

// EnsurePrivatePostgres is EnsurePostgres that never takes a machine's
// own server: the private one on port, running or started. The tests use
// it, so that a user's server (a default max_connections of 100, with a
// dev stack on it) never decides whether they pass.
func EnsurePrivatePostgres(ctx context.Context, dataDir string, port int, logger *slog.Logger) (*Postgres, error) {
	return ensurePostgres(ctx, dataDir, port, logger, nil)
}

func ensurePostgres(ctx context.Context, dataDir string, port int, logger *slog.Logger, candidates []string) (*Postgres, error) {
	if port == 0 {
		port = DefaultPrivatePort
	}
	private := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", port)
	for _, u := range append([]string{private}, candidates...) {
		if ping(ctx, u) == nil {
			logger.Info("using running PostgreSQL", "url", redact(u))
			return &Postgres{AdminURL: u}, nil
		}
	}
	return StartPrivatePostgres(ctx, dataDir, port, logger)
}

// StartPrivatePostgres starts (initialising it the first time) a private
// server in dataDir/postgres on 127.0.0.1:port, whatever else is running:
// one a caller may restart or kill, never the machine's shared server.
func StartPrivatePostgres(ctx context.Context, dataDir string, port int, logger *slog.Logger) (*Postgres, error) {
	private := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", port)
	bin, err := PostgresBin()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(filepath.Join(dataDir, "postgres"))
	if err != nil {
		return nil, err
	}
	p := &Postgres{AdminURL: private, Private: true, dir: dir, pgCtl: filepath.Join(bin, "pg_ctl"), port: port}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("postgres: data dir: %w", err)
	}
	// initdb and postgres refuse to run as root; run them as the
	// "postgres" system user the packages create.
	if os.Geteuid() == 0 {
		if p.cred, err = PostgresUser(); err != nil {
			return nil, err
		}
		if err := ChownTree(dir, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		logger.Info("initialising private PostgreSQL", "dir", dir)
		if err := p.run(ctx, filepath.Join(bin, "initdb"), "-D", dir, "-U", "postgres",
			"--auth=trust", "-E", "UTF8", "--locale=C"); err != nil {
			return nil, fmt.Errorf("postgres: initdb: %w", err)
		}
	}
	logger.Info("starting private PostgreSQL", "dir", dir, "port", port)
	if err := p.start(ctx); err != nil {
		// pg_ctl puts the server in a session of its own, so a Ctrl-C
		// (or a canceled ctx) that stops pg_ctl while it waits leaves
		// the server running with nobody to stop it: stop it here.
		p.stopOrphan(context.WithoutCancel(ctx))
		return nil, err
	}
	return p, nil
}

// stopOrphan stops a server that a failed start may have left running:
// its pid file appears within moments of the fork.
func (p *Postgres) stopOrphan(ctx context.Context) {
	for range 20 {
		if _, err := os.Stat(filepath.Join(p.dir, "postmaster.pid")); err == nil {
			_ = p.run(ctx, p.pgCtl, "-D", p.dir, "-m", "immediate", "-w", "-t", "30", "stop")
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *Postgres) start(ctx context.Context) error {
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c max_connections=300", p.port)
	if p.hasStatements() {
		// It lets 'idemflow bench' account for each database's
		// statements, commits and WAL per request.
		opts += " -c shared_preload_libraries=pg_stat_statements"
	}
	if err := p.run(ctx, p.pgCtl, "-D", p.dir, "-l", filepath.Join(p.dir, "server.log"), "-w", "-t", "60", "-o", opts, "start"); err != nil {
		return fmt.Errorf("postgres: pg_ctl start (see %s): %w", filepath.Join(p.dir, "server.log"), err)
	}
	if err := ping(ctx, p.AdminURL); err != nil {
		return fmt.Errorf("postgres: started but not answering: %w", err)
	}
	return nil
}

// hasStatements says whether the installation ships pg_stat_statements
// (contrib: Debian's and Homebrew's packages do), in the library
// directory beside its binaries.
func (p *Postgres) hasStatements() bool {
	root := filepath.Dir(filepath.Dir(p.pgCtl))
	for _, dir := range []string{"lib", "lib/postgresql", "lib64", "lib64/pgsql"} {
		if m, _ := filepath.Glob(filepath.Join(root, dir, "pg_stat_statements.*")); len(m) > 0 {
			return true
		}
	}
	return false
}

// Crash stops a private server as a power cut would (pg_ctl's immediate
// mode: no checkpoint, every backend killed, recovery from the WAL at the
// next start), then starts it again.
func (p *Postgres) Crash(ctx context.Context) error {
	if !p.Private {
		return errors.New("postgres: not a private server: refusing to crash it")
	}
	if err := p.run(ctx, p.pgCtl, "-D", p.dir, "-m", "immediate", "-w", "stop"); err != nil {
		return fmt.Errorf("postgres: immediate stop: %w", err)
	}
	return p.start(ctx)
}

// Stop stops a private server; it leaves a server it did not start alone.
func (p *Postgres) Stop(ctx context.Context) error {
	if !p.Private {
		return nil
	}
	return p.run(ctx, p.pgCtl, "-D", p.dir, "-m", "fast", "-w", "stop")
}

// StopPrivatePostgres stops a private server left running in dataDir (by
// 'idemflow postgres', which does not wait for it).
func StopPrivatePostgres(ctx context.Context, dataDir string) error {
	dir, err := filepath.Abs(filepath.Join(dataDir, "postgres"))
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "postmaster.pid")); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	bin, err := PostgresBin()
	if err != nil {
		return err
	}
	p := &Postgres{Private: true, dir: dir, pgCtl: filepath.Join(bin, "pg_ctl")}
	if os.Geteuid() == 0 {
		if p.cred, err = PostgresUser(); err != nil {
			return err
		}
	}
	return p.Stop(ctx)
}

// PostgresUser is the PostgreSQL package's system user, as whom a root
// process runs PostgreSQL (and the tools that start it), which refuse
// root.
func PostgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("postgres: running as root needs the 'postgres' system user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (p *Postgres) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = os.TempDir()
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", filepath.Base(name), err, out)
	}
	return nil
}

// PostgresBin is the directory of the installed PostgreSQL's programs,
// the highest major version's.
func PostgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Highest major version first.
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", ErrNoPostgres
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// ChownTree gives dir and everything in it to uid and gid, and lets them
// reach it through its parents (t.TempDir's are root's alone).
func ChownTree(dir string, uid, gid int) error {
	// The parent must be traversable by the postgres user.
	for d := filepath.Dir(dir); d != "/" && d != "."; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			_ = os.Chmod(d, fi.Mode().Perm()|0o011)
		}
	}
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

func ping(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgurl.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// EnsureDatabase creates database name on the server of adminURL if it does
// not exist, and returns a URL to it.
func EnsureDatabase(ctx context.Context, adminURL, name string) (string, error) {
	conn, err := pgurl.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connect %s: %w", redact(adminURL), err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up database %s: %w", name, err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			var again bool
			// Another process may have created it meanwhile.
			if qerr := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&again); qerr != nil || !again {
				return "", fmt.Errorf("create database %s: %w", name, err)
			}
		}
	}
	return WithDatabase(adminURL, name)
}

// EnsureDatabaseOf creates the database dbURL names when its server says
// it does not exist (SQLSTATE 3D000), through the server's postgres
// database with dbURL's credentials, and reports whether it did. Any other
// failure to connect is returned as it is: a wrong password or host is
// not a missing database.
func EnsureDatabaseOf(ctx context.Context, dbURL string) (created bool, err error) {
	conn, err := pgurl.Connect(ctx, dbURL)
	if err == nil {
		return false, conn.Close(context.Background())
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" {
		return false, fmt.Errorf("connect %s: %w", redact(dbURL), err)
	}
	cfg, err := pgurl.ParseConfig(dbURL)
	if err != nil {
		return false, err
	}
	admin, err := WithDatabase(dbURL, "postgres")
	if err != nil {
		return false, err
	}
	if _, err := EnsureDatabase(ctx, admin, cfg.Database); err != nil {
		return false, err
	}
	return true, nil
}

// WithDatabase returns dbURL pointing at database name.
func WithDatabase(dbURL, name string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", fmt.Errorf("parse database URL: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "<unparseable url>"
	}
	return p.Redacted()
}

// Port is the port a private server listens on.
func (p *Postgres) Port() int { return p.port }

// Addr is where a private server listens: 127.0.0.1 and its port.
func (p *Postgres) Addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// LogPath is a private server's log.
func (p *Postgres) LogPath() string { return filepath.Join(p.dir, "server.log") }

// Kill SIGKILLs a private server and every backend of it at once (the
// postmaster's process group: pg_ctl starts it in a session of its own),
// as a machine that loses its power does: nothing is flushed or handed
// over, and the data directory is left as it was.
func (p *Postgres) Kill() error {
	if !p.Private {
		return errors.New("postgres: not a private server: refusing to kill it")
	}
	b, err := os.ReadFile(filepath.Join(p.dir, "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("postgres: kill: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 1 {
		return fmt.Errorf("postgres: kill: postmaster.pid names no process: %q", first)
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("postgres: kill %d: %w", pid, err)
	}
	// The port is free once the postmaster is gone.
	for range 100 {
		if Exited(pid) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("postgres: %d still runs after SIGKILL", pid)
}

// Promote makes a standby a primary (pg_ctl promote) and waits until it
// takes writes.
func (p *Postgres) Promote(ctx context.Context) error {
	if !p.Private {
		return errors.New("postgres: not a private server: refusing to promote it")
	}
	if err := p.run(ctx, p.pgCtl, "-D", p.dir, "-w", "-t", "60", "promote"); err != nil {
		return fmt.Errorf("postgres: promote: %w", err)
	}
	return nil
}

// RemoveData deletes a stopped private server's data directory (a killed
// primary's, before it is rebuilt from the new one).
func (p *Postgres) RemoveData() error {
	if !p.Private {
		return errors.New("postgres: not a private server: refusing to remove its data")
	}
	return os.RemoveAll(p.dir)
}

// StartStandby makes a streaming standby of the private server p in
// dataDir/postgres (a base backup with pg_basebackup, which writes the
// connection and standby.signal) and starts it on 127.0.0.1:port, where it
// reports to p as application name. It streams from from (p's own
// address when empty: from may be a link in between, with its latency).
// It is asynchronous until p's synchronous_standby_names names it.
func (p *Postgres) StartStandby(ctx context.Context, dataDir string, port int, name, from string) (*Postgres, error) {
	if !p.Private {
		return nil, errors.New("postgres: a standby is made of a private server only")
	}
	dir, err := filepath.Abs(filepath.Join(dataDir, "postgres"))
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, fmt.Errorf("postgres: standby dir: %w", err)
	}
	if p.cred != nil {
		if err := ChownTree(filepath.Dir(dir), int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			return nil, err
		}
	}
	bin := filepath.Dir(p.pgCtl)
	conninfo := func(addr string) (string, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return "", fmt.Errorf("postgres: standby source %q: %w", addr, err)
		}
		return fmt.Sprintf("host=%s port=%s user=postgres application_name=%s", host, port, name), nil
	}
	direct, err := conninfo(p.Addr())
	if err != nil {
		return nil, err
	}
	if err := p.run(ctx, filepath.Join(bin, "pg_basebackup"), "-D", dir, "-d", direct, "-R", "-X", "stream", "-c", "fast"); err != nil {
		return nil, fmt.Errorf("postgres: base backup: %w", err)
	}
	if from != "" && from != p.Addr() {
		// The backup is taken directly; the standby streams over from.
		// The last primary_conninfo in the file is the one that holds.
		link, err := conninfo(from)
		if err != nil {
			return nil, err
		}
		f, err := os.OpenFile(filepath.Join(dir, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("postgres: standby conninfo: %w", err)
		}
		_, err = fmt.Fprintf(f, "primary_conninfo = '%s'\n", link)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("postgres: standby conninfo: %w", err)
		}
	}
	s := &Postgres{AdminURL: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", port),
		Private: true, dir: dir, pgCtl: p.pgCtl, port: port, cred: p.cred}
	if err := s.start(ctx); err != nil {
		s.stopOrphan(context.WithoutCancel(ctx))
		return nil, err
	}
	return s, nil
}

// Exited reports whether process pid has ended: it is gone, or it is a
// zombie that its parent has not reaped yet. A zombie holds no port, file
// or lock; when it is reaped is its parent's business, and a container's
// init may take seconds.
func Exited(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		// No /proc to ask (or the process has just gone): signal 0 again.
		return syscall.Kill(pid, 0) != nil
	}
	// The state follows the command's name, which is in parentheses
	// and may hold any character, ")" too.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
