package simulation

import (
	"flag"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var (
	seedsFlag = flag.Int("seeds", 200, "number of seeds TestSimulation runs (from -seedbase on)")
	seedBase  = flag.Uint64("seedbase", 1, "first seed TestSimulation runs")
	seedFlag  = flag.Int64("seed", -1, "run only this seed, and print its schedule and trace with -v")
	watchdog  = flag.Duration("watchdog", time.Minute, "real time after which a run counts as hung")
	// retriesFlag puts a client that retries conditional writes (as docs/design.md
	// forbids) under every node: the sound protocol must stay correct.
	retriesFlag = flag.Int("clientretries", 0, "retries of conditional writes by every node's client (a broken client)")
	// releaseFirstFlag reverses the order of every handoff's retire:
	// release the record, then seal. The protocol does not rely on the
	// order (the next owner seals the chain itself), so it must stay correct.
	handoffsFlag     = flag.Bool("handoffs", true, "moves, drains and idle releases in the schedule (false: the schedules from before they joined it)")
	releaseFirstFlag = flag.Bool("releasefirst", false, "handoffs release the record before they seal the log")
)

// result is one simulated run, judged.
type result struct {
	seed       uint64
	violations []string
	schedule   string
	trace      string
	stats      string
	counts     map[string]int
}

// simulate plays one seed in a synctest bubble and judges it. retries > 0
// puts a client that retries conditional writes under every node (the
// broken variant "client retries").
func simulate(t *testing.T, seed uint64, retries int) result {
	return simulateWorld(t, newWorld(seed, retries, *handoffsFlag))
}

// simulateWorld plays w's schedule and judges it.
func simulateWorld(t *testing.T, w *world) result {
	seed := w.seed
	done := make(chan struct{})
	go func() {
		defer close(done)
		synctest.Test(t, func(t *testing.T) { w.run() })
	}()
	// A deadlock on a mutex is not a durable block: synctest cannot see it
	// and the bubble would hang the test binary. A run takes milliseconds;
	// this watchdog of real time only ever fires on a hang.
	select {
	case <-done:
	case <-time.After(*watchdog):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		return result{seed: seed, violations: []string{fmt.Sprintf("the run did not finish in %v of real time: a deadlock?", *watchdog)},
			trace: w.h.traceText() + "\n\ngoroutines:\n" + string(buf)}
	}
	r := result{seed: seed, violations: w.check(), trace: w.h.traceText()}
	var b strings.Builder
	fmt.Fprintf(&b, "%d nodes, %d cells, ttl %v, %d steps\n", w.cfg.nodes, w.cfg.cells, w.cfg.ttl, len(w.steps))
	for i, s := range w.steps {
		fmt.Fprintf(&b, "%3d %v\n", i, s)
	}
	r.schedule = b.String()
	n := [3]int{}
	for _, a := range w.h.appends {
		n[a.out]++
	}
	barrier := 0
	for _, rd := range w.h.reads {
		if rd.barrier {
			barrier++
		}
	}
	reasons := map[string]int{}
	for _, l := range w.h.leases {
		reasons[l.reason]++
	}
	snaps, gcs, deleted := 0, 0, 0
	for _, s := range w.h.snaps {
		if s.err == nil {
			snaps++
		}
	}
	for _, g := range w.h.gcs {
		if g.err == nil {
			gcs++
		}
		deleted += g.deleted
	}
	r.stats = fmt.Sprintf("appends ok %d, refused %d, unknown %d; reads %d (barrier %d, from a snapshot %d); leases %d %v; incarnations %d; fences %d; snapshots %d; gc runs %d, files deleted %d; fencing walks restarted after a race with GC %d",
		n[acked], n[refused], n[unknown], len(w.h.reads), barrier, w.h.compacted, len(w.h.leases), reasons, len(w.incs), strings.Count(r.trace, " fenced ("),
		snaps, gcs, deleted, w.h.gcRaces.Load())
	r.counts = map[string]int{"ok": n[acked], "refused": n[refused], "unknown": n[unknown], "reads": len(w.h.reads),
		"barrier": barrier, "incarnations": len(w.incs), "fences": strings.Count(r.trace, " fenced ("),
		"snapshots": snaps, "gc": gcs, "gc-deleted": deleted, "reads-from-snapshot": w.h.compacted, "fence-gc-races": int(w.h.gcRaces.Load())}
	for k, c := range reasons {
		r.counts["lease:"+k] = c
	}
	for k, c := range w.h.handoffs {
		r.counts[k] = c
	}
	r.stats += fmt.Sprintf("; handoffs %v", w.h.handoffs)
	return r
}

// replay is the command that runs one seed again; extra holds more flags.
func replay(test string, seed uint64, tags, extra string) string {
	if tags != "" {
		tags = " -tags " + tags
	}
	return fmt.Sprintf("go test%s ./replication/simulation -run '^%s$' -seed=%d%s -v", tags, test, seed, extra)
}

// report fails t with the seed's violations, its schedule, its trace and
// the command that replays it.
func report(t *testing.T, r result, cmd string) {
	t.Helper()
	t.Errorf("seed %d: %d broken promise(s):\n  %s\nreplay: %s\n\nschedule:\n%s\ntrace:\n%s",
		r.seed, len(r.violations), strings.Join(r.violations, "\n  "), cmd, r.schedule, r.trace)
}

// TestSimulation plays -seeds seeds (default 200) of the sound protocol,
// or the one given with -seed, and fails on any broken promise.
func TestSimulation(t *testing.T) {
	seeds := make([]uint64, 0, *seedsFlag)
	if *seedFlag >= 0 {
		seeds = append(seeds, uint64(*seedFlag))
	} else {
		for i := range *seedsFlag {
			seeds = append(seeds, *seedBase+uint64(i))
		}
	}
	var mu sync.Mutex
	total := map[string]int{}
	t.Cleanup(func() {
		keys := slices.Sorted(maps.Keys(total))
		var b strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%d", k, total[k])
		}
		t.Logf("%d seeds:%s", len(seeds), b.String())
	})
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			if len(seeds) > 1 {
				t.Parallel()
			}
			r := simulate(t, seed, *retriesFlag)
			mu.Lock()
			for k, c := range r.counts {
				total[k] += c
			}
			mu.Unlock()
			if len(r.violations) > 0 {
				extra := ""
				if *retriesFlag > 0 {
					extra = fmt.Sprintf(" -clientretries=%d", *retriesFlag)
				}
				report(t, r, replay("TestSimulation", seed, "", extra))
				return
			}
			if *seedFlag >= 0 && testing.Verbose() {
				t.Logf("seed %d: %s\nschedule:\n%s\ntrace:\n%s", seed, r.stats, r.schedule, r.trace)
			}
		})
	}
}

// Seeds that found bugs in the protocol, kept as regression tests. A seed
// replays its schedule (a pure function of the seed and of plan in this
// version of the simulation; without the handoffs, which joined the
// schedule after these were found), so each one keeps exercising the
// situation that broke; owner's takeover, renewal and fence tests and, for the data
// path, replication/resurrect_test.go pin each bug deterministically.
var regressions = []struct {
	seed uint64
	bug  string
}{
	{408, "owner: Node.Close hung when a lease it could not release was ended under the node's lock"},
	{4714, "owner: a cached view older than the record being judged called a restarted owner dead"},
	{4974, "owner: a cached view older than the record being judged called a restarted owner dead"},
	{5402, "owner: the renewal loop's unbounded peer refresh held it past its fence deadline under a slow store"},
	{1007280, "owner: a failed read after a failed release was taken for a takeover; Close stopped renewing before it stopped acting"},
	{3253, "replication: a read below a snapshot started from a record file a late PUT wrote again after GC deleted it, and returned the log cut short"},
	{5009, "replication: a read below a snapshot started from a record file a late PUT wrote again after GC deleted it, and returned the log cut short"},
	{845, "replication: a restore from a snapshot a stale owner wrote again after GC deleted it returned the log cut short (seen under -race)"},
	{5916, "replication: a stale owner's read from its own index started from a file a late PUT wrote again after GC deleted it, and returned the log cut short"},
}

func TestRegressions(t *testing.T) {
	for _, reg := range regressions {
		t.Run(fmt.Sprintf("seed=%d", reg.seed), func(t *testing.T) {
			t.Parallel()
			if r := simulateWorld(t, newWorld(reg.seed, 0, false)); len(r.violations) > 0 {
				t.Logf("regression of: %s", reg.bug)
				report(t, r, replay("TestSimulation", reg.seed, "", " -handoffs=false"))
			}
		})
	}
}
