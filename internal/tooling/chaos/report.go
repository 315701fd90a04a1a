package chaos

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/idemflow/idemflow/activities"
	"github.com/idemflow/idemflow/internal/tooling/progress"
)

// ClientReport is what one client did and what the checks found for it.
type ClientReport struct {
	Jobs, Intents, Attempts, Replays int
	// Conflicts: reused keys with changed parameters refused with 422.
	Conflicts, Rejected, Abandoned, GaveUp int
	// UnansweredDone and UnansweredFailed: abandoned or given-up intents
	// that ended SUCCESS with one row, or failed (or never arrived) with none.
	UnansweredDone, UnansweredFailed int
	Tickets, Orders, Events          int
	// Refunds are the HTTP tools' effects, counted by their downstream.
	Refunds      int
	FinalReplays int

	// The violations. For the naive client only LogicalDuplicates is
	// counted: that it is above zero shows the checks can see duplicates.
	Duplicates, LogicalDuplicates, Lost, Stuck, ReplayMismatches int
	IllegalTransitions, StockOff, CouponsOff, DoubleCaptures     int
	BurstMismatches, ReuseAccepted                               int

	stats *clientStats
}

// Report is a chaos run's result.
type Report struct {
	Seed          uint64
	Client, Naive ClientReport
	Faults        map[Kind]int
	Enabled       map[Kind]bool
	// External: the run was pointed at a deployment it did not start.
	External bool
	// KilledInTx counts worker kills while one of its database sessions
	// was inside a statement or a transaction.
	KilledInTx    int
	ReconcileRuns int
	Reconciled    map[activities.Verdict]int
	// NeverStarted counts, by final status, intents that ended with no run
	// in Temporal: claimed, then the gateway died (or the caller left)
	// before the start; only reconcile settles those.
	NeverStarted map[string]int
	Violations   []string
	// Replication, ReplicationLag and Failovers describe a run with
	// pg-failover; StandbyBehind is the most WAL (bytes) a standby had not
	// flushed when its primary was killed. AcknowledgedLost counts answers
	// an agent had, whose record and row a failover after them lost;
	// LossWindow is the longest time from such an answer to its failover.
	// Cluster is Config.Cluster.
	Cluster        string
	Replication    string
	ReplicationLag time.Duration
	Failovers      int
	StandbyBehind  int64
	// Promoted and Rebuilt are the longest a failover took until the
	// standby took writes, and until the old primary streamed again.
	Promoted, Rebuilt time.Duration
	AcknowledgedLost  int
	LossWindow        time.Duration
	// CutShort: the time bound (Config.Duration) ended the load before
	// the idemflow client's Jobs were done.
	CutShort   bool
	LoadTime   time.Duration
	SettleTime time.Duration
	Total      time.Duration

	mu sync.Mutex
}

func newReport(r *run) *Report {
	rep := &Report{Seed: r.cfg.Seed, Faults: map[Kind]int{}, Enabled: map[Kind]bool{}, Reconciled: map[activities.Verdict]int{}, NeverStarted: map[string]int{}}
	for k, v := range r.cfg.Faults {
		rep.Enabled[k] = v > 0
	}
	rep.Client.stats, rep.Naive.stats = &clientStats{}, &clientStats{}
	return rep
}

func (rep *Report) violate(format string, args ...any) {
	rep.mu.Lock()
	defer rep.mu.Unlock()
	rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
}

// OK is true when no invariant was broken: no violation was recorded, and
// every counter that names a broken invariant is zero (so that a counter
// added without a violation still fails the run).
func (rep *Report) OK() bool {
	c := rep.Client
	dups, lost, stuck, mism := rep.Zeros()
	return len(rep.Violations) == 0 && dups+lost+stuck+mism == 0 &&
		c.IllegalTransitions+c.StockOff+c.CouponsOff+c.ReuseAccepted == 0
}

// Failures lists why the run failed the guarantee: its violations, every
// number that names a broken invariant when it is not zero, and reused
// keys that were sent with none refused. None: it held.
func (rep *Report) Failures() []string {
	var out []string
	if len(rep.Violations) > 0 {
		out = append(out, fmt.Sprintf("%d violations: %q", len(rep.Violations), rep.Violations))
	}
	if d, l, s, m := rep.Zeros(); d+l+s+m != 0 {
		out = append(out, fmt.Sprintf("duplicates %d, lost %d, stuck %d, replay mismatches %d", d, l, s, m))
	}
	c := rep.Client
	if c.ReuseAccepted != 0 || c.BurstMismatches != 0 {
		out = append(out, fmt.Sprintf("reused keys executed %d, bursts answered two ways %d", c.ReuseAccepted, c.BurstMismatches))
	}
	if rep.Faults[Reuse] > 0 && c.Conflicts == 0 {
		out = append(out, fmt.Sprintf("%d reused keys sent, none refused with 422", rep.Faults[Reuse]))
	}
	return out
}

// Zeros are the four numbers the run exists for.
func (rep *Report) Zeros() (duplicates, lost, stuck, mismatches int) {
	c := rep.Client
	return c.Duplicates + c.LogicalDuplicates + c.DoubleCaptures, c.Lost, c.Stuck, c.ReplayMismatches + c.BurstMismatches
}

// fold copies the agents' counts into the report.
func (c *ClientReport) fold() {
	s := c.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	c.Jobs, c.Intents, c.Attempts, c.Replays = s.Jobs, s.Intents, s.Attempts, s.Replays
	c.Conflicts, c.Rejected, c.Abandoned, c.GaveUp = s.Conflicts, s.Rejected, s.Abandoned, s.GaveUp
	c.BurstMismatches, c.ReuseAccepted = s.BurstMismatch, s.ReuseAccepts
}

// foldViolations adds what the idemflow client's agents saw as they went.
func (rep *Report) foldViolations() {
	s := rep.Client.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.violations {
		rep.violate("%s", v)
	}
}

func (rep *Report) print(w io.Writer) {
	c, n := rep.Client, rep.Naive
	fmt.Fprintf(w, "\nchaos run (seed %d): load %v, settle %v, total %v\n\n", rep.Seed,
		rep.LoadTime.Round(time.Second), rep.SettleTime.Round(time.Second), rep.Total.Round(time.Second))
	line := func(label string, a, b any) { fmt.Fprintf(w, "  %-34s %16v %16v\n", label, a, b) }
	line("", "idemflow client", "naive client")
	line("agent tasks (jobs)", c.Jobs, n.Jobs)
	line("intents", c.Intents, n.Intents)
	line("HTTP attempts", c.Attempts, n.Attempts)
	line("answers marked replayed", c.Replays, "-")
	line("reused keys refused (422)", fmt.Sprintf("%d", c.Conflicts), "-")
	line("business rejections", c.Rejected, "-")
	line("abandoned / gave up", fmt.Sprintf("%d / %d", c.Abandoned, c.GaveUp), "-")
	line("  unanswered, ended done / failed", fmt.Sprintf("%d / %d", c.UnansweredDone, c.UnansweredFailed), "-")
	line("tickets / orders / order events", fmt.Sprintf("%d / %d / %d", c.Tickets, c.Orders, c.Events), fmt.Sprintf("%d / %d / %d", n.Tickets, n.Orders, n.Events))
	line("refunds at the tools' downstream", c.Refunds, n.Refunds)
	line("final replays checked", c.FinalReplays, "-")
	dups, lost, stuck, mism := rep.Zeros()
	line("DUPLICATES", dups, n.LogicalDuplicates)
	line("LOST", lost, "-")
	line("STUCK (PROCESSING, running)", stuck, "-")
	line("REPLAY MISMATCHES", mism, "-")
	line("illegal transitions", c.IllegalTransitions, "-")
	line("stock / coupon counts off", fmt.Sprintf("%d / %d", c.StockOff, c.CouponsOff), "-")
	line("payments captured twice", c.DoubleCaptures, "-")
	line("reused key executed", c.ReuseAccepted, "-")
	fmt.Fprintf(w, "\n  faults injected\n")
	for _, k := range Kinds() {
		if rep.Enabled[k] {
			fmt.Fprintf(w, "    %-18s %6d\n", k, rep.Faults[k])
		} else {
			fmt.Fprintf(w, "    %-18s %6s\n", k, "off")
		}
	}
	fmt.Fprintf(w, "    (worker kills inside a statement or transaction: %d)\n", rep.KilledInTx)
	if rep.Enabled[PGFailover] {
		fmt.Fprintf(w, "    (failovers: %d on a %s cluster, %s replication, link round trip %v; the standby was at most %d bytes of WAL behind at a kill;\n"+
			"     promoted within %v, the old primary streaming again within %v;\n"+
			"     acknowledged intents a failover lost: %d, answered at most %v before it)\n",
			rep.Failovers, rep.Cluster, rep.Replication, rep.ReplicationLag, rep.StandbyBehind, rep.Promoted.Round(time.Millisecond), rep.Rebuilt.Round(time.Millisecond),
			rep.AcknowledgedLost, rep.LossWindow.Round(time.Millisecond))
	}
	var parts []string
	for _, v := range []activities.Verdict{activities.VerdictFromRow, activities.VerdictFromWorkflow, activities.VerdictFailed, activities.VerdictSettled, activities.VerdictError} {
		parts = append(parts, fmt.Sprintf("%s %d", v, rep.Reconciled[v]))
	}
	fmt.Fprintf(w, "\n  claimed but never started (gateway died or caller left before the start): %d, ended FAILED %d, SUCCESS %d\n",
		rep.NeverStarted["FAILED"]+rep.NeverStarted["SUCCESS"], rep.NeverStarted["FAILED"], rep.NeverStarted["SUCCESS"])
	if rep.External {
		fmt.Fprintf(w, "  reconcile: the deployment's own (not counted)\n")
	} else {
		fmt.Fprintf(w, "  reconcile: %d runs settled stale intents: %s\n", rep.ReconcileRuns, strings.Join(parts, ", "))
	}
	if rep.OK() {
		fmt.Fprintf(w, "\nOK: no duplicate, nothing lost, nothing stuck; the naive client made %d duplicates under the same faults\n", n.LogicalDuplicates)
		return
	}
	fmt.Fprintf(w, "\nFAILED: %d violations (DUPLICATES %d, LOST %d, STUCK %d, REPLAY MISMATCHES %d, reused key executed %d)\n",
		len(rep.Violations), dups, lost, stuck, mism, c.ReuseAccepted)
	for i, v := range rep.Violations {
		if i == 50 {
			fmt.Fprintf(w, "  ... %d more\n", len(rep.Violations)-50)
			break
		}
		fmt.Fprintf(w, "  - %s\n", v)
	}
}

// bar is the progress of the load, over what bounds it: the jobs, or the
// time, or, with both, whichever is nearer its end.
type bar struct {
	mu    sync.Mutex
	p     *progress.Bar
	n, of int
	dur   time.Duration
	start time.Time
}

// barSteps is the resolution of a bar whose fill is computed.
const barSteps = 1000

func newBar(w io.Writer, of int, dur time.Duration) *bar {
	return &bar{p: progress.New(w, "load", barSteps), of: of, dur: dur, start: time.Now()}
}

func (b *bar) step() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n++
	el := min(time.Since(b.start), b.dur)
	var fill float64
	label := fmt.Sprintf("%d jobs", b.n)
	if b.of > 0 {
		fill = float64(min(b.n, b.of)) / float64(b.of)
		label = fmt.Sprintf("%d/%d jobs", b.n, b.of)
	}
	if b.dur > 0 {
		fill = max(fill, min(1, float64(el)/float64(b.dur)))
		label += fmt.Sprintf(", %v of %v load", el.Round(time.Second), b.dur.Round(time.Second))
	}
	b.p.Set(int(fill*barSteps), label)
}

func (b *bar) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.p.Finish()
}
