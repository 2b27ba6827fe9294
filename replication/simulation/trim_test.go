package simulation

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/replication"
)

// Trims in the simulation. A trim step raises a cell's trim point from
// several nodes at once — the holder and others, as an old owner and a new
// one may after a takeover — each by replication.RaiseTrim on its own
// client (with every fault its node suffers) to a point between the trim
// point and the holder's head (a third of the steps, the holder's point is
// a retention's: the first record younger than an age), then the holder
// deletes below the point it
// got, by GC bounded by it (GCOptions.Below), as the daemon does. Checked:
// the trim point, read after each step, is never below one seen before or
// answered by a RaiseTrim; the bounded GC
// deletes no file that holds an acknowledged record at or above its point.

// trimSeed keys planTrims' stream.
const trimSeed = 0x7219

// planTrims draws trim steps, about one every 2 s, from a stream of their
// own, so that adding them left every older seed's other steps as they
// were.
func planTrims(seed uint64, cfg simConfig, main []step) []at {
	rng := rand.New(rand.NewPCG(seed^trimSeed, 0x72))
	var end time.Duration
	for _, s := range main {
		end += s.gap
	}
	var out []at
	for t := time.Duration(rng.IntN(2000)) * time.Millisecond; t <= end; t += time.Duration(rng.IntN(4000)) * time.Millisecond {
		out = append(out, at{t: t, s: step{kind: opTrim, node: rng.IntN(cfg.nodes), cell: rng.IntN(cfg.cells), burst: 1 + rng.IntN(3), frac: rng.IntN(1001)}})
	}
	return out
}

// trimMax is the highest trim point seen per cell.
type trimMax struct {
	mu  sync.Mutex
	max map[string]replication.Pos
}

func (w *world) trim(ctx context.Context, n *simNode, cell string, s step) {
	inc, cl := w.peekHolder(n, cell)
	if cl == nil {
		return
	}
	head := cl.log.Head().NextPos
	cur, _, err := replication.ReadTrim(ctx, inc.b, cell)
	if err != nil || head <= cur {
		return
	}
	// A third of the steps trim as `deed run --retention` does: the
	// holder's point is the first record younger than an age (0.3 to 3 s),
	// found by reading on from the trim point.
	retain := s.frac%3 == 0
	var aged replication.Pos
	if retain {
		age := time.Duration(300+s.frac*27/10) * time.Millisecond
		var ok bool
		if aged, ok = agedPoint(ctx, inc.b, cell, max(cur, 1), time.Now().Add(-age).UnixMilli(), w.logOpts()); !ok || aged <= cur {
			return
		}
	}
	want := func(i int) replication.Pos {
		if i == 0 && retain {
			return aged
		}
		f := (s.frac + 337*i) % 1001
		return max(cur, 1) + replication.Pos(f)*(head-max(cur, 1))/1000
	}
	var (
		wg   sync.WaitGroup
		mine replication.Pos
		merr error
	)
	for i := range s.burst {
		b := inc.b
		if i > 0 { // another node's client: any node may raise it
			if o := w.nodes[(n.idx+i)%len(w.nodes)].peek(); o != nil {
				b = o.b
			}
		}
		wg.Go(func() {
			got, err := replication.RaiseTrim(ctx, b, cell, want(i))
			if i == 0 {
				mine, merr = got, err
			}
			if err == nil {
				w.sawTrim(cell, got) // it was at least got when RaiseTrim returned
			}
		})
	}
	wg.Wait()
	w.checkTrimMonotone(ctx, cell)
	if merr != nil {
		w.h.logf("trim %s before %d by %s: %s", cell, want(0), inc.client, shortErr(merr))
		return
	}
	// The holder's deletion below the point it got (slotOf in the daemon).
	below := ^replication.TxID(0)
	recs, err := replication.Read(ctx, inc.b, cell, mine-1, 1, w.logOpts()...)
	switch {
	case errors.Is(err, replication.ErrCompacted):
		return
	case err != nil:
		return
	case len(recs) > 0:
		below = recs[0].TxID
	}
	rep, err := replication.GC(ctx, inc.b, cell, replication.GCOptions{Below: below}, w.logOpts()...)
	w.h.addGC(&gcOp{cell: cell, by: inc.client, deleted: len(rep.Deleted), err: err})
	how := "trim"
	if retain {
		how = "retention trim"
	}
	w.h.logf("%s %s before %d by %s: gc below tx %d deleted %d %s", how, cell, mine, inc.client, uint64(below), len(rep.Deleted), shortKeys(rep.Deleted))
	w.h.count(how)
	w.checkTrimDeleted(cell, mine, rep.Deleted)
}

// agedPoint is the position of the first record from `from` on whose
// timestamp is after cutoff (ms), or the log's end when none is: the trim
// point of a retention. ok is false when the read failed.
func agedPoint(ctx context.Context, b bucket.Bucket, cell string, from replication.Pos, cutoff int64, opts []replication.Option) (replication.Pos, bool) {
	p := from
	for {
		recs, err := replication.Read(ctx, b, cell, p-1, 100, opts...)
		if err != nil {
			return 0, false
		}
		for _, r := range recs {
			if r.TS > cutoff {
				return r.Pos, true
			}
			p = r.Pos + 1
		}
		if len(recs) == 0 {
			return p, true
		}
	}
}

// sawTrim notes that cell's trim point was at least p.
func (w *world) sawTrim(cell string, p replication.Pos) {
	w.trims.mu.Lock()
	defer w.trims.mu.Unlock()
	if w.trims.max == nil {
		w.trims.max = map[string]replication.Pos{}
	}
	w.trims.max[cell] = max(w.trims.max[cell], p)
}

// checkTrimMonotone reads the trim point (fault-free) and objects if it
// is lower than one seen before.
func (w *world) checkTrimMonotone(ctx context.Context, cell string) {
	p, _, err := replication.ReadTrim(ctx, w.mem, cell)
	if err != nil {
		return
	}
	w.trims.mu.Lock()
	defer w.trims.mu.Unlock()
	if w.trims.max == nil {
		w.trims.max = map[string]replication.Pos{}
	}
	if old := w.trims.max[cell]; p < old {
		w.h.violate("%s: the trim point moved back from %d to %d", cell, old, p)
		return
	}
	w.trims.max[cell] = p
}

// checkTrimDeleted objects to a deleted record file that held an
// acknowledged record at or above the trim point before.
func (w *world) checkTrimDeleted(cell string, before replication.Pos, deleted []string) {
	gone := map[string]bool{}
	for _, k := range deleted {
		if strings.HasSuffix(k, ".ltx") {
			gone[k] = true
		}
	}
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	for _, a := range w.h.appends {
		if a.cell != cell || a.out != acked || a.res.Pos < before {
			continue
		}
		if k := replication.SlotKey(cell, a.res.Epoch, a.res.TxID); gone[k] {
			w.h.violations = append(w.h.violations, fmt.Sprintf("%s: a trim before %d deleted %s, which holds acknowledged position %d", cell, before, k, a.res.Pos))
		}
	}
}
