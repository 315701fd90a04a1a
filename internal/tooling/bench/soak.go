package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/idemflow/idemflow/internal/ops/tickets"
	"github.com/idemflow/idemflow/internal/pgurl"
)

// SoakConfig says what a soak holds load on, and for how long.
type SoakConfig struct {
	// URL and Token reach idemflow's gateway.
	URL, Token string
	// DatabaseURL is idemflow's database: its connections (the
	// Temporal databases beside it included) and records are counted.
	DatabaseURL string
	// Duration of the whole soak; a sample is printed every Interval.
	Duration, Interval time.Duration
	// Clients send new tickets in a closed loop; every ReplayEvery-th
	// request of each is a replay of one of its earlier intents.
	Clients, ReplayEvery int
	// Warmup new intents are made before the soak's clock starts, so
	// that caches bounded by a count of workflows (the embedded server's
	// history cache) are full before any sample is judged, however slowly
	// a loaded machine makes them.
	Warmup int
	// Metrics are the /metrics URLs of the idemflow processes to watch
	// (a dev stack's gateway serves its one process's).
	Metrics []string
	// Out gets a line per sample and the verdict.
	Out io.Writer
}

// ProcessSample is one process's memory, read from its /metrics.
type ProcessSample struct {
	URL string
	// RSS and HeapLive are bytes; HeapLive is the heap live after the
	// last GC (its goal over 1+GOGC/100), which does not swing with the
	// collector's cycle as the heap in use does.
	RSS, HeapLive, HeapInuse float64
	Goroutines               float64
	Err                      error
}

// SoakSample is one interval.
type SoakSample struct {
	At time.Duration
	// Intents are the new intents answered in the interval, Replays the
	// replays; Rate is Intents per second.
	Intents, Replays int
	Rate             float64
	P50, P99         time.Duration
	Errors           int
	Processes        []ProcessSample
	Connections      int
	Records          int
	// Total is the new intents answered since the start.
	Total int
}

// SoakReport is a soak's samples and its verdict.
type SoakReport struct {
	Samples []SoakSample
	// Flat: nothing grew from the middle third of the run to the last,
	// beyond the allowance (Growths says what did).
	Flat    bool
	Growths []string
	// PerIntent is each process's live heap growth from the middle
	// third to the last, over the intents between them.
	PerIntent []float64
}

// HeapAllowance is how much a process's live heap may grow from the
// middle third of a soak to the last and still count as flat: 10%, and
// at least 16 MiB, so that a cache filling to its bound is not growth.
func HeapAllowance(mid float64) float64 { return max(0.10*mid, 16<<20) }

// Soak holds a steady mix of new intents and replays against a stack and
// samples every process's memory, its goroutines, the database's
// connections and the record count, every Interval. At the end it judges
// growth: each process's live heap (and goroutines, and connections) in
// the last third of the run against the middle third, the first third
// being warm-up (caches filling to their bounds).
func Soak(ctx context.Context, cfg SoakConfig) (SoakReport, error) {
	if cfg.Interval <= 0 || cfg.Duration < 3*cfg.Interval {
		return SoakReport{}, fmt.Errorf("soak: the duration must hold at least three intervals")
	}
	db, err := pgurl.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return SoakReport{}, fmt.Errorf("soak: %w", err)
	}
	defer db.Close(context.WithoutCancel(ctx))
	post := newPoster()
	run := uuid.NewString()[:8]
	var mu sync.Mutex
	var lat []time.Duration
	intents, replays, errs, total := 0, 0, 0, 0

	if cfg.Warmup > 0 {
		began := time.Now()
		var made, failed atomic.Int64
		var warm sync.WaitGroup
		for c := range cfg.Clients {
			warm.Go(func() {
				for n := c; n < cfg.Warmup && ctx.Err() == nil; n += cfg.Clients {
					status, err := post(ctx, cfg.URL+tickets.Create.Route, cfg.Token, fmt.Sprintf("soak-%s-warm-%d", run, n),
						fmt.Sprintf(`{"customer_id":"soak-warm","title":"warm-up %d"}`, n))
					if err != nil || status != http.StatusCreated {
						failed.Add(1)
					} else {
						made.Add(1)
					}
				}
			})
		}
		warm.Wait()
		fmt.Fprintf(cfg.Out, "soak: warm-up: %d new intents (%d failed) in %s, before the first sample\n", made.Load(), failed.Load(), time.Since(began).Round(time.Second))
	}

	ctx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
	for c := range cfg.Clients {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				key := fmt.Sprintf("soak-%s-%d-%d", run, c, n)
				replay := cfg.ReplayEvery > 0 && n > 0 && n%cfg.ReplayEvery == 0
				if replay {
					key = fmt.Sprintf("soak-%s-%d-%d", run, c, n-1)
				}
				t0 := time.Now()
				status, err := post(ctx, cfg.URL+tickets.Create.Route, cfg.Token, key,
					fmt.Sprintf(`{"customer_id":"soak-%d","title":"soak %d"}`, c, n-btoi(replay)))
				took := time.Since(t0)
				if ctx.Err() != nil {
					return
				}
				mu.Lock()
				switch {
				case err != nil || status != http.StatusCreated:
					errs++
				case replay:
					replays++
				default:
					intents++
					total++
					lat = append(lat, took)
				}
				mu.Unlock()
			}
		})
	}

	var rep SoakReport
	fmt.Fprintf(cfg.Out, "soak: %d clients, a replay every %d requests, for %s; a sample every %s\n",
		cfg.Clients, cfg.ReplayEvery, cfg.Duration, cfg.Interval)
	fmt.Fprintf(cfg.Out, "%8s %8s %9s %9s %9s %6s  %-28s %9s %9s %10s %9s %9s\n",
		"time", "intents", "intents/s", "p50", "p99", "errors", "process", "RSS", "heap live", "goroutines", "pg conns", "records")
	start := time.Now()
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break // the run is over: its last, partial interval is not a sample
		}
		mu.Lock()
		s := SoakSample{At: time.Since(start), Intents: intents, Replays: replays, Errors: errs, Total: total}
		window := lat
		intents, replays, errs, lat = 0, 0, 0, nil
		mu.Unlock()
		slices.Sort(window)
		if len(window) > 0 {
			s.P50, s.P99 = quantile(window, 0.50), quantile(window, 0.99)
		}
		s.Rate = float64(s.Intents) / cfg.Interval.Seconds()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		for _, u := range cfg.Metrics {
			s.Processes = append(s.Processes, scrape(sctx, u))
		}
		_ = db.QueryRow(sctx, `SELECT count(*) FROM pg_stat_activity WHERE datname LIKE current_database() || '%'`).Scan(&s.Connections)
		_ = db.QueryRow(sctx, `SELECT count(*) FROM idempotency_record`).Scan(&s.Records)
		cancel()
		rep.Samples = append(rep.Samples, s)
		for i, p := range s.Processes {
			head := fmt.Sprintf("%8s %8d %9.0f %9s %9s %6d", s.At.Round(time.Second), s.Intents, s.Rate, ms(s.P50), ms(s.P99), s.Errors)
			tail := fmt.Sprintf("%9d %9d", s.Connections, s.Records)
			if i > 0 {
				head, tail = strings.Repeat(" ", len(head)), ""
			}
			if p.Err != nil {
				fmt.Fprintf(cfg.Out, "%s  %-28s %s\n", head, p.URL, p.Err)
				continue
			}
			fmt.Fprintf(cfg.Out, "%s  %-28s %9s %9s %10.0f %s\n", head, short(p.URL), mib(int64(p.RSS)), mib(int64(p.HeapLive)), p.Goroutines, tail)
		}
	}
	stop()
	wg.Wait()
	rep.judge(cfg.Metrics)
	rep.print(cfg.Out)
	return rep, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// short names a metrics URL by its host.
func short(u string) string {
	u = strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://")
	host, _, _ := strings.Cut(u, "/")
	return host
}

// judge compares the last third of the samples with the middle third.
func (r *SoakReport) judge(metrics []string) {
	n := len(r.Samples)
	mid, last := r.Samples[n/3:2*n/3], r.Samples[2*n/3:]
	r.Flat = true
	grew := func(format string, args ...any) {
		r.Flat = false
		r.Growths = append(r.Growths, fmt.Sprintf(format, args...))
	}
	// The middle third's median against the last third's: a sample may
	// catch a burst, or a collection that found little live for a
	// moment (a dev stack's once read 97 MiB between 110s), and the
	// median is the level that stays.
	level := func(ss []SoakSample, f func(SoakSample) float64) float64 {
		vs := make([]float64, len(ss))
		for i, s := range ss {
			vs[i] = f(s)
		}
		slices.Sort(vs)
		if n := len(vs); n%2 == 0 {
			return (vs[n/2-1] + vs[n/2]) / 2
		}
		return vs[len(vs)/2]
	}
	intentsBetween := 0
	for _, s := range last {
		intentsBetween += s.Intents
	}
	for i, u := range metrics {
		proc := func(f func(ProcessSample) float64) func(SoakSample) float64 {
			return func(s SoakSample) float64 {
				if i >= len(s.Processes) || s.Processes[i].Err != nil {
					return 0
				}
				return f(s.Processes[i])
			}
		}
		heapMid, heapLast := level(mid, proc(func(p ProcessSample) float64 { return p.HeapLive })), level(last, proc(func(p ProcessSample) float64 { return p.HeapLive }))
		perIntent := 0.0
		if intentsBetween > 0 {
			perIntent = (heapLast - heapMid) / float64(intentsBetween)
		}
		r.PerIntent = append(r.PerIntent, perIntent)
		if heapLast-heapMid > HeapAllowance(heapMid) {
			grew("%s: live heap %s in the middle third, %s in the last (%.0f bytes per intent)", short(u), mib(int64(heapMid)), mib(int64(heapLast)), perIntent)
		}
		gMid, gLast := level(mid, proc(func(p ProcessSample) float64 { return p.Goroutines })), level(last, proc(func(p ProcessSample) float64 { return p.Goroutines }))
		if gLast > gMid*1.2+50 {
			grew("%s: %.0f goroutines in the middle third, %.0f in the last", short(u), gMid, gLast)
		}
	}
	cMid, cLast := level(mid, func(s SoakSample) float64 { return float64(s.Connections) }), level(last, func(s SoakSample) float64 { return float64(s.Connections) })
	if cLast > cMid+5 {
		grew("PostgreSQL connections: %.0f in the middle third, %.0f in the last", cMid, cLast)
	}
}

func (r SoakReport) print(w io.Writer) {
	total := 0
	if n := len(r.Samples); n > 0 {
		total = r.Samples[n-1].Total
	}
	for i, b := range r.PerIntent {
		fmt.Fprintf(w, "process %d: live heap %+.0f bytes per intent over the last third\n", i+1, b)
	}
	if r.Flat {
		fmt.Fprintf(w, "FLAT: after %d intents, no process's live heap, goroutines or connections grew from the middle third of the run to the last\n", total)
		return
	}
	fmt.Fprintf(w, "GROWING: after %d intents, from the middle third of the run to the last:\n", total)
	for _, g := range r.Growths {
		fmt.Fprintln(w, "  "+g)
	}
}

// scrape reads a process's memory and goroutines from its /metrics.
func scrape(ctx context.Context, url string) ProcessSample {
	p := ProcessSample{URL: url}
	v, status, err := readMetrics(ctx, url)
	if err != nil {
		p.Err = err
		return p
	}
	gogc := v["go_gc_gogc_percent"]
	if gogc <= 0 {
		gogc = 100
	}
	p.RSS, p.HeapInuse, p.Goroutines = v["process_resident_memory_bytes"], v["go_memstats_heap_inuse_bytes"], v["go_goroutines"]
	p.HeapLive = v["go_memstats_next_gc_bytes"] / (1 + gogc/100)
	if p.RSS == 0 && p.Goroutines == 0 {
		p.Err = fmt.Errorf("%s: no process metrics (HTTP %d)", url, status)
	}
	return p
}

// readMetrics reads a Prometheus text page: each series (its name with
// its labels, as written) and its value.
func readMetrics(ctx context.Context, url string) (map[string]float64, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	v := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		// The value follows the series' last space (a label's value
		// may hold spaces).
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(line[i+1:]), 64); err == nil {
			v[line[:i]] = f
		}
	}
	return v, resp.StatusCode, sc.Err()
}
