// Package patroni runs a real Patroni cluster on loopback, from Debian's
// packages (patroni, etcd-server, haproxy): the topology teams run
// PostgreSQL in, for the tests that prove idemflow on it. Its one job: start
// the cluster (one etcd, Patroni members, HAProxy routing to the leader by
// Patroni's REST checks), name its URLs, and apply the faults an operator
// meets: a leader SIGKILLed with every backend, a member started again,
// a switchover.
package patroni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/devserver"
	"github.com/idemflow/idemflow/internal/tooling/tcpproxy"
	"github.com/jackc/pgx/v5"
)

// Binaries are where Debian's packages put the programs (/usr/sbin, for
// HAProxy, may be missing from a user's PATH). scripts/test.sh installs
// them.
var binaries = map[string]string{"patroni": "/usr/bin/patroni", "etcd": "/usr/bin/etcd", "haproxy": "/usr/sbin/haproxy"}

// Config shapes a cluster.
type Config struct {
	// Dir holds every member's data, configuration and log.
	Dir string
	// Members is the number of PostgreSQL members (3 when zero).
	Members int
	// Async turns Patroni's synchronous mode off: a control, where a
	// commit is acknowledged before any standby has it. Otherwise
	// synchronous_mode and synchronous_mode_strict are on, as a
	// deployment that keeps acknowledged commits across failovers runs.
	Async bool
	// ReplicationDelay, when set, is the round trip added to every
	// member's replication link (and to Patroni's own connections between
	// members): standbys then receive each commit that much later.
	ReplicationDelay time.Duration
	// Ports gives each listener its port (a free loopback port, below
	// the kernel's ephemeral range: testenv.FreePort).
	Ports  func() (int, error)
	Logger *slog.Logger
}

// Cluster is a running cluster.
type Cluster struct {
	cfg     Config
	etcd    *process
	haproxy *process
	haAddr  string
	members []*member
	cred    *syscall.Credential
}

type member struct {
	name, dir, conf string
	pgAddr, rest    string
	link            *tcpproxy.Proxy // the address other members reach it at
	proc            *process
}

// Start starts etcd, the members (the first bootstraps the cluster) and
// HAProxy, and returns once there is a leader and, in synchronous mode, a
// synchronous standby.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	for name, path := range binaries {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("patroni: %s is not installed (scripts/test.sh installs Debian's patroni, etcd-server and haproxy): %w", name, err)
		}
	}
	if cfg.Members == 0 {
		cfg.Members = 3
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	bin, err := devserver.PostgresBin()
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg}
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root: the whole cluster runs as
		// the PostgreSQL package's user.
		if c.cred, err = devserver.PostgresUser(); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	if err := c.own(cfg.Dir); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	var ports [3]int // etcd's client and peer ports, HAProxy's
	for i := range ports {
		if ports[i], err = cfg.Ports(); err != nil {
			return nil, err
		}
	}
	client, peer := ports[0], ports[1]
	etcdAddr := "127.0.0.1:" + strconv.Itoa(client)
	c.etcd, err = c.start("etcd", filepath.Join(cfg.Dir, "etcd.log"), binaries["etcd"], "--name", "e1",
		"--data-dir", filepath.Join(cfg.Dir, "etcd"), "--enable-v2=true",
		"--listen-client-urls", "http://"+etcdAddr, "--advertise-client-urls", "http://"+etcdAddr,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peer), "--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peer),
		"--initial-cluster", fmt.Sprintf("e1=http://127.0.0.1:%d", peer))
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, "http://"+etcdAddr+"/version", 30*time.Second); err != nil {
		return nil, fmt.Errorf("patroni: etcd: %w\n%s", err, tail(filepath.Join(cfg.Dir, "etcd.log")))
	}
	for i := range cfg.Members {
		m := &member{name: fmt.Sprintf("pg%d", i+1)}
		m.dir = filepath.Join(cfg.Dir, m.name)
		pg, err := cfg.Ports()
		if err != nil {
			return nil, err
		}
		rest, err := cfg.Ports()
		if err != nil {
			return nil, err
		}
		m.pgAddr = "127.0.0.1:" + strconv.Itoa(pg)
		m.rest = "127.0.0.1:" + strconv.Itoa(rest)
		if m.link, err = tcpproxy.Listen(m.pgAddr, tcpproxy.DelayLine(cfg.ReplicationDelay)); err != nil {
			return nil, err
		}
		m.conf = filepath.Join(cfg.Dir, m.name+".yml")
		if err := os.WriteFile(m.conf, []byte(c.memberConfig(m, etcdAddr, bin)), 0o644); err != nil {
			return nil, err
		}
		c.members = append(c.members, m)
	}
	if err := c.own(cfg.Dir); err != nil {
		return nil, err
	}
	// The first member bootstraps; the others join once it leads.
	if err := c.Restart(ctx, c.members[0].name); err != nil {
		return nil, err
	}
	if _, err := c.Leader(ctx, time.Minute); err != nil {
		return nil, err
	}
	for _, m := range c.members[1:] {
		if err := c.Restart(ctx, m.name); err != nil {
			return nil, err
		}
	}
	if err := c.WaitHealthy(ctx, 2*time.Minute); err != nil {
		return nil, err
	}
	c.haAddr = "127.0.0.1:" + strconv.Itoa(ports[2])
	haConf := filepath.Join(cfg.Dir, "haproxy.cfg")
	if err := os.WriteFile(haConf, []byte(c.haproxyConfig()), 0o644); err != nil {
		return nil, err
	}
	if c.haproxy, err = c.startAs(nil, "haproxy", filepath.Join(cfg.Dir, "haproxy.log"), binaries["haproxy"], "-db", "-f", haConf); err != nil {
		return nil, err
	}
	if err := waitTCP(ctx, c.haAddr, 30*time.Second); err != nil {
		return nil, fmt.Errorf("patroni: haproxy: %w\n%s", err, tail(filepath.Join(cfg.Dir, "haproxy.log")))
	}
	if err := c.waitRouted(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// memberConfig is m's Patroni configuration. ttl 12 s with a 1 s loop: a
// leader that dies is replaced in about 12 s (Patroni wants loop_wait +
// 2 * retry_timeout <= ttl). Trust on loopback, as the other test servers.
func (c *Cluster) memberConfig(m *member, etcdAddr, bin string) string {
	sync := !c.cfg.Async
	return fmt.Sprintf(`scope: idemflow-test
name: %[1]s
restapi:
  listen: %[2]s
  connect_address: %[2]s
etcd:
  host: %[3]s
bootstrap:
  dcs:
    ttl: 12
    loop_wait: 1
    retry_timeout: 5
    maximum_lag_on_failover: 1073741824
    synchronous_mode: %[4]t
    synchronous_mode_strict: %[4]t
    postgresql:
      use_pg_rewind: true
      parameters:
        max_connections: 300
        wal_log_hints: 'on'
        wal_keep_size: 256MB
  initdb:
  - encoding: UTF8
  - locale: C
  pg_hba:
  - host replication replicator 127.0.0.1/32 trust
  - host all all 127.0.0.1/32 trust
  - local all all trust
postgresql:
  listen: %[5]s
  connect_address: %[6]s
  data_dir: %[7]s
  bin_dir: %[8]s
  pgpass: %[7]s.pgpass
  authentication:
    replication: {username: replicator, password: replicator}
    superuser: {username: postgres, password: postgres}
    rewind: {username: postgres, password: postgres}
  parameters:
    unix_socket_directories: %[9]s
`, m.name, m.rest, etcdAddr, sync, m.pgAddr, m.link.Addr, m.dir, bin, c.cfg.Dir)
}

// haproxyConfig routes to whichever member answers Patroni's /primary
// check, as Patroni's own HAProxy template does, and cuts the sessions
// of a member that stops leading.
func (c *Cluster) haproxyConfig() string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
  maxconn 2000
defaults
  mode tcp
  timeout connect 2s
  timeout client 30m
  timeout server 30m
  timeout check 1s
listen primary
  bind %s
  option httpchk OPTIONS /primary
  http-check expect status 200
  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
`, c.haAddr)
	for _, m := range c.members {
		_, port, _ := net.SplitHostPort(m.rest)
		fmt.Fprintf(&b, "  server %s %s check port %s\n", m.name, m.pgAddr, port)
	}
	return b.String()
}

// waitRouted waits until HAProxy sends every connection to the leader.
// It starts with every server up, and marks the standbys down only after
// their checks failed (fall 2, every 500 ms): a database made through it
// meanwhile could be looked for on a standby.
func (c *Cluster) waitRouted(ctx context.Context, within time.Duration) error {
	var last error
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		last = nil
		for range 2 * len(c.members) {
			conn, err := pgx.Connect(ctx, c.HAProxyURL("postgres"))
			if err != nil {
				last = err
				break
			}
			var standby bool
			err = conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&standby)
			_ = conn.Close(ctx)
			if err == nil && standby {
				err = errors.New("a connection reached a standby")
			}
			if err != nil {
				last = err
				break
			}
		}
		if last == nil {
			return nil
		}
	}
	return fmt.Errorf("patroni: HAProxy does not route to the leader alone within %s: %w", within, last)
}

// MultiHostURL names every member, with target_session_attrs=read-write
// (docs/production.md): pgx connects to whichever takes writes.
func (c *Cluster) MultiHostURL(database string) string {
	hosts := make([]string, len(c.members))
	for i, m := range c.members {
		hosts[i] = m.pgAddr
	}
	return "postgres://postgres@" + strings.Join(hosts, ",") + "/" + database + "?sslmode=disable&target_session_attrs=read-write&connect_timeout=2"
}

// HAProxyAddr is where HAProxy takes connections to the leader.
func (c *Cluster) HAProxyAddr() string { return c.haAddr }

// HAProxyURL reaches the leader through HAProxy.
func (c *Cluster) HAProxyURL(database string) string {
	return "postgres://postgres@" + c.haAddr + "/" + database + "?sslmode=disable&connect_timeout=2"
}

// memberState is a member as Patroni's REST API /cluster lists it.
type memberState struct {
	Name  string `json:"name"`
	Role  string `json:"role"` // leader, sync_standby, replica
	State string `json:"state"`
}

// Members lists the members as the cluster sees them (Patroni's /cluster,
// asked of any member that answers).
func (c *Cluster) Members(ctx context.Context) ([]memberState, error) {
	var last error
	for _, m := range c.members {
		var out struct {
			Members []memberState `json:"members"`
		}
		if err := getJSON(ctx, "http://"+m.rest+"/cluster", &out); err != nil {
			last = err
			continue
		}
		return out.Members, nil
	}
	return nil, fmt.Errorf("patroni: no member answers /cluster: %w", last)
}

// Leader waits up to within for a running leader other than the members
// named in not (a leader just killed stays listed until its key expires)
// and names it.
func (c *Cluster) Leader(ctx context.Context, within time.Duration, not ...string) (string, error) {
	var last error
	for deadline := time.Now().Add(within); ; {
		ms, err := c.Members(ctx)
		for _, m := range ms {
			if m.Role == "leader" && m.State == "running" && !slices.Contains(not, m.Name) {
				return m.Name, nil
			}
		}
		last = err
		if time.Now().After(deadline) {
			return "", fmt.Errorf("patroni: no leader within %s (%v): %s", within, last, c.logs())
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// WaitHealthy waits up to within for every member to run, with a leader
// and, in synchronous mode, a synchronous standby.
func (c *Cluster) WaitHealthy(ctx context.Context, within time.Duration) error {
	var ms []memberState
	for deadline := time.Now().Add(within); ; {
		ms, _ = c.Members(ctx)
		running, leader, sync := 0, false, false
		for _, m := range ms {
			if m.State == "running" || m.State == "streaming" {
				running++
				leader = leader || m.Role == "leader"
				sync = sync || m.Role == "sync_standby"
			}
		}
		if running == len(c.members) && leader && (sync || c.cfg.Async) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("patroni: not healthy within %s: %+v\n%s", within, ms, c.logs())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// KillLeader SIGKILLs the leader's Patroni, its postmaster and every
// backend, and cuts its replication links, as a machine that loses its
// power: nothing is handed over.
// It names the member killed.
func (c *Cluster) KillLeader(ctx context.Context) (string, error) {
	name, err := c.Leader(ctx, 30*time.Second)
	if err != nil {
		return "", err
	}
	m := c.member(name)
	if m.proc != nil {
		m.proc.kill()
	}
	pid, err := postmasterPID(m.dir)
	if err != nil {
		return name, fmt.Errorf("patroni: kill %s: %w", name, err)
	}
	// The postmaster and its children at once: a backend left alive
	// would go on answering its client.
	victims := append(childrenOf(pid), pid)
	for _, p := range victims {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	// Its network goes with it: what its links still carried (WAL on its
	// way to a standby, ReplicationDelay's worth) never arrives.
	// Commits a synchronous standby had flushed were acknowledged; the
	// others were not, so only an asynchronous cluster loses by it.
	m.link.Cut()
	for range 200 {
		if devserver.Exited(pid) {
			return name, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return name, fmt.Errorf("patroni: %s's postmaster %d still runs after SIGKILL", name, pid)
}

// Restart starts member name's Patroni (again): a killed leader rejoins
// as a standby, rewound if it must be.
func (c *Cluster) Restart(_ context.Context, name string) error {
	m := c.member(name)
	if m.proc != nil {
		m.proc.kill()
	}
	_ = os.Remove(filepath.Join(m.dir, "postmaster.pid"))
	p, err := c.start(m.name, filepath.Join(c.cfg.Dir, m.name+".log"), binaries["patroni"], m.conf)
	if err != nil {
		return err
	}
	m.proc = p
	return nil
}

// Switchover hands the lead to another member with patronictl, as an
// operator does: the synchronous standby (which synchronous mode
// requires), or any replica in asynchronous mode. It names the new
// leader.
func (c *Cluster) Switchover(ctx context.Context) (string, error) {
	ms, err := c.Members(ctx)
	if err != nil {
		return "", err
	}
	var leader, candidate string
	for _, m := range ms {
		switch {
		case m.Role == "leader":
			leader = m.Name
		case m.Role == "sync_standby" || (c.cfg.Async && candidate == "" && m.State != "stopped"):
			candidate = m.Name
		}
	}
	if leader == "" || candidate == "" {
		return "", fmt.Errorf("patroni: switchover: no leader or candidate in %+v", ms)
	}
	cmd := exec.CommandContext(ctx, "patronictl", "-c", c.member(leader).conf, "switchover", "--leader", leader, "--candidate", candidate, "--force")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Successfully switched over") {
		return "", fmt.Errorf("patroni: switchover %s to %s: %v\n%s", leader, candidate, err, out)
	}
	return candidate, nil
}

// Stop stops HAProxy, the members and etcd, within stopGrace and a
// moment: every member is asked at once. One by one, each leader's stop
// handed the lead to the next member, whose own stop then waited for it,
// and a caller stopped by Ctrl-C was killed before the last ones (and
// etcd) were reached: they ran on with nobody to stop them.
func (c *Cluster) Stop() {
	if c.haproxy != nil {
		c.haproxy.kill()
	}
	var wg sync.WaitGroup
	for _, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if m.proc != nil {
				m.proc.stop(stopGrace)
			}
			// A postmaster its Patroni left (killed, or stopped too late).
			if pid, err := postmasterPID(m.dir); err == nil {
				for _, p := range append(childrenOf(pid), pid) {
					_ = syscall.Kill(p, syscall.SIGKILL)
				}
			}
			if m.link != nil {
				_ = m.link.Close()
			}
		}()
	}
	wg.Wait()
	// Last: a member stopping still writes to etcd (it gives up its
	// leader key).
	if c.etcd != nil {
		c.etcd.kill()
	}
}

// stopGrace is how long Stop waits for a member's Patroni to stop its
// PostgreSQL before it kills both.
const stopGrace = 10 * time.Second

func (c *Cluster) member(name string) *member {
	for _, m := range c.members {
		if m.name == name {
			return m
		}
	}
	panic("patroni: no member " + name)
}

// logs is the end of every member's log, for a failure's message.
func (c *Cluster) logs() string {
	var b strings.Builder
	for _, m := range c.members {
		fmt.Fprintf(&b, "--- %s\n%s\n", m.name, tail(filepath.Join(c.cfg.Dir, m.name+".log")))
	}
	return b.String()
}

// process is a child the cluster started.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (c *Cluster) start(name, logPath, bin string, args ...string) (*process, error) {
	return c.startAs(c.cred, name, logPath, bin, args...)
}

// startAs starts bin as cred's user, in a process group of its own (a
// Ctrl-C of the caller reaches it only through Stop), and tied to the
// caller's life: if the caller dies without Stop (SIGKILLed, or killed
// while Stop waits), the kernel signals it (Linux's parent-death signal).
// Patroni gets SIGTERM, so that it stops its PostgreSQL; the others
// (etcd, HAProxy) hold nothing worth a clean stop and are killed.
func (c *Cluster) startAs(cred *syscall.Credential, name, logPath, bin string, args ...string) (*process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = c.cfg.Dir
	death := syscall.SIGKILL
	if bin == binaries["patroni"] {
		death = syscall.SIGTERM
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: death}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("patroni: start %s: %w", name, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop asks the process to end (SIGTERM: Patroni stops its PostgreSQL),
// and kills it after grace.
func (p *process) stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

// own gives dir to the cluster's user.
func (c *Cluster) own(dir string) error {
	if c.cred == nil {
		return nil
	}
	return devserver.ChownTree(dir, int(c.cred.Uid), int(c.cred.Gid))
}

// postmasterPID is the process ID a data directory's postmaster.pid
// names (its first line).
func postmasterPID(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("postmaster.pid names no process: %q", first)
	}
	return pid, nil
}

// childrenOf lists the processes whose parent is pid (from /proc).
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read
		// after its closing parenthesis.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

func getJSON(ctx context.Context, u string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func waitHTTP(ctx context.Context, u string, within time.Duration) error {
	var last error
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var v any
		if last = getJSON(ctx, u, &v); last == nil {
			return nil
		}
	}
	return last
}

func waitTCP(ctx context.Context, addr string, within time.Duration) error {
	var last error
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn.Close()
		}
		last = err
	}
	return last
}

// tail is the last 3 kB of a log file.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	return string(b[max(0, len(b)-3000):])
}
