package simulation

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/deedkit/deed/replication"
)

// check judges a finished run and returns every broken promise it finds.
func (w *world) check() []string {
	var v []string
	v = append(v, w.h.violations...)
	for _, cell := range w.cells {
		if err := w.finalE[cell]; err != nil {
			v = append(v, fmt.Sprintf("final restore of %s: %v", cell, err))
			continue
		}
		v = append(v, w.checkFinal(cell)...)
		v = append(v, w.checkReads(cell)...)
		v = append(v, w.checkSnapshots(cell)...)
		v = append(v, w.checkMarkers(cell)...)
		v = append(v, w.checkWriters(cell)...)
		v = append(v, w.checkLinearizable(cell)...)
	}
	v = append(v, w.checkEpochs()...)
	return v
}

// checkFinal: the final restore holds every acknowledged record exactly
// once, where it was acknowledged, and in order; no refused record; and
// the positions are 1..n without gaps, with epochs never going back.
func (w *world) checkFinal(cell string) []string {
	var v []string
	recs := w.final[cell]
	byData := map[string]*appendOp{}
	for _, a := range w.h.appends {
		if a.cell == cell {
			byData[a.data] = a
		}
	}
	seen := map[string]bool{}
	var epoch uint64
	for i, r := range recs {
		d := string(r.Data)
		if r.Pos != replication.Pos(i+1) {
			v = append(v, fmt.Sprintf("%s: final record %d (%q) has position %d", cell, i+1, d, r.Pos))
		}
		if r.Epoch < epoch {
			v = append(v, fmt.Sprintf("%s: final record %q at %d is of epoch %d, after epoch %d", cell, d, r.Pos, r.Epoch, epoch))
		}
		epoch = max(epoch, r.Epoch)
		if seen[d] {
			v = append(v, fmt.Sprintf("%s: record %q is in the final log twice", cell, d))
		}
		seen[d] = true
		a := byData[d]
		switch {
		case a == nil:
			v = append(v, fmt.Sprintf("%s: final record %q at %d was never appended", cell, d, r.Pos))
		case a.out == refused:
			v = append(v, fmt.Sprintf("%s: refused record %q (%v) is in the final log at %d", cell, d, shortErr(a.err), r.Pos))
		case a.out == acked && (a.res.Pos != r.Pos || a.res.Epoch != r.Epoch || a.res.TxID != r.TxID):
			v = append(v, fmt.Sprintf("%s: record %q acknowledged at pos %d epoch %d tx %d, restored at pos %d epoch %d tx %d",
				cell, d, a.res.Pos, a.res.Epoch, a.res.TxID, r.Pos, r.Epoch, r.TxID))
		}
	}
	for _, a := range w.h.appends {
		if a.cell == cell && a.out == acked && !seen[a.data] {
			v = append(v, fmt.Sprintf("%s: acknowledged record %q (pos %d epoch %d) is not in the final log", cell, a.data, a.res.Pos, a.res.Epoch))
		}
	}
	return v
}

// checkReads: every read, with or without a barrier, is a contiguous
// segment of the final log starting right after the position it read
// after (the log only grows at its end, so a read of the whole log is a
// prefix of it, and one from a snapshot on is the segment after the
// snapshot), and no read shows a refused record. A read that failed is
// not here: failing is allowed, returning wrong or missing records is not.
//
// And no read is cut short: a read returns every record acknowledged
// before it began (at a position after the one it read after), barrier or
// not. When an append is acknowledged, every slot of the chain up to its
// record is filled (a record, a seal or a tombstone), so a walk that starts
// later reaches it — unless it takes a hole GC made under it for the end
// of the chain, which is what the delete order of GC and stillValid rule
// out. Porcupine checks this for barrier reads too; this check also covers
// the reads without a barrier, and the restores of the snapshots.
func (w *world) checkReads(cell string) []string {
	var v []string
	final := w.final[cell]
	refusedData := map[string]bool{}
	for _, a := range w.h.appends {
		if a.cell == cell && a.out == refused {
			refusedData[a.data] = true
		}
	}
	for _, r := range w.h.reads {
		if r.cell != cell {
			continue
		}
		end := r.after + replication.Pos(len(r.recs))
		for _, a := range w.h.appends {
			if a.cell == cell && a.out == acked && a.ret < r.call && a.res.Pos > end && (r.until == 0 || a.res.Pos < r.until) {
				v = append(v, fmt.Sprintf("%s: a %s (barrier %v, incarnation %d) after pos %d ends at pos %d, but %q was acknowledged at pos %d before it began",
					cell, r.src, r.barrier, r.inc, r.after, end, a.data, a.res.Pos))
				break
			}
		}
		for i, rec := range r.recs {
			d := string(rec.Data)
			if refusedData[d] {
				v = append(v, fmt.Sprintf("%s: a %s (barrier %v, incarnation %d) shows refused record %q", cell, r.src, r.barrier, r.inc, d))
			}
			j := int(r.after) + i // where the record must be in the final log
			if j >= len(final) || string(final[j].Data) != d || final[j].Pos != rec.Pos {
				v = append(v, fmt.Sprintf("%s: a %s (barrier %v, incarnation %d) after pos %d is not a segment of the final log: record %d is %q at pos %d",
					cell, r.src, r.barrier, r.inc, r.after, i+1, d, rec.Pos))
				break
			}
		}
	}
	return v
}

// checkWriters: one writer per epoch. Every records file of an epoch
// carries the token of the one lease minted for that epoch.
func (w *world) checkWriters(cell string) []string {
	var v []string
	for _, f := range w.files[cell] {
		if f.Kind != replication.KindRecords {
			continue
		}
		l := w.h.lease(cell, f.Epoch)
		switch {
		case l == nil:
			v = append(v, fmt.Sprintf("%s: e%d/%d holds records, but no lease of epoch %d was ever minted", cell, f.Epoch, f.TxID, f.Epoch))
		case f.Token != l.token:
			v = append(v, fmt.Sprintf("%s: e%d/%d was written by token %.8s, the lease of epoch %d is %.8s", cell, f.Epoch, f.TxID, f.Token, f.Epoch, l.token))
		}
	}
	return v
}

// checkEpochs: epochs strictly increase. No two leases of one cell share
// an epoch, and a claim that began after another returned has a higher
// epoch.
func (w *world) checkEpochs() []string {
	var v []string
	ls := w.h.leases
	for i, a := range ls {
		for _, b := range ls[i+1:] {
			if a.cell != b.cell {
				continue
			}
			if a.epoch == b.epoch {
				v = append(v, fmt.Sprintf("%s: two leases of epoch %d (%s and %s)", a.cell, a.epoch, a.inc.client, b.inc.client))
			}
			if (a.ret < b.call && a.epoch >= b.epoch) || (b.ret < a.call && b.epoch >= a.epoch) {
				v = append(v, fmt.Sprintf("%s: epochs went back: %s got %d, %s got %d", a.cell, a.inc.client, a.epoch, b.inc.client, b.epoch))
			}
		}
	}
	return v
}

// The linearizability model: a cell's log as a sequence of records.
type (
	logState struct {
		log string // "|"-joined records
		n   int
	}
	appendIn struct {
		data    string
		pos     replication.Pos // for an acknowledged append
		unknown bool
	}
	// readIn is a read of the records after position after. The simulation
	// reads the whole log (after 0) unless GC compacted its start into a
	// snapshot; then it reads the records after the snapshot, and what it
	// returns is the log without its first after records. The model needs
	// only that (a barrier read from a snapshot is still linearizable: the
	// records it skips are in the snapshot, immutable, and checked against
	// the final log by checkReads and checkSnapshots).
	readIn struct{ after int }
)

// dropRecords is log ("|"-joined) without its first n records.
func dropRecords(log string, n int) string {
	for ; n > 0 && log != ""; n-- {
		i := strings.IndexByte(log[1:], '|')
		if i < 0 {
			return ""
		}
		log = log[1+i:]
	}
	return log
}

func joined(recs []replication.Record) string {
	var b strings.Builder
	for _, r := range recs {
		b.WriteByte('|')
		b.Write(r.Data)
	}
	return b.String()
}

var logModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{logState{}} },
	Step: func(state, input, output any) []any {
		s := state.(logState)
		switch in := input.(type) {
		case appendIn:
			next := logState{log: s.log + "|" + in.data, n: s.n + 1}
			switch {
			case in.unknown && in.pos == 0:
				return []any{next, s} // applied, or not
			case replication.Pos(s.n+1) != in.pos:
				return nil
			}
			return []any{next}
		case readIn:
			if in.after <= s.n && output.(string) == dropRecords(s.log, in.after) {
				return []any{s}
			}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		switch in := input.(type) {
		case appendIn:
			if in.unknown {
				return fmt.Sprintf("append(%s) → ?", in.data)
			}
			return fmt.Sprintf("append(%s) → %d", in.data, in.pos)
		case readIn:
			return fmt.Sprintf("read(after %d) → %s", in.after, output)
		default:
			return fmt.Sprintf("%v → %v", input, output)
		}
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%d: %s", state.(logState).n, state.(logState).log) },
}

// checkLinearizable runs porcupine over the cell's history: acknowledged
// appends (with the position they returned), appends whose outcome is
// unknown (returning at +∞: they may apply at any time after their call,
// or never), barrier reads with what they returned, and the final restore
// as one last read after everything. Refused appends are left out: they
// must not apply, and checkFinal and checkReads make sure they never show.
//
// The final read settles every unknown outcome, and the checker settles it
// up front to keep the search small: the final log is the whole log even
// after GC (the newest snapshot's state holds every record it covers), so
// a record absent from it never applied (the append is left out), and one
// present applied at the position it has there. The model still accepts
// applied-or-not for an unknown append without a position.
func (w *world) checkLinearizable(cell string) []string {
	finalPos := map[string]replication.Pos{}
	for _, r := range w.final[cell] {
		finalPos[string(r.Data)] = r.Pos
	}
	var ops []porcupine.Operation
	for _, a := range w.h.appends {
		if a.cell != cell || a.out == refused {
			continue
		}
		in := appendIn{data: a.data, pos: a.res.Pos, unknown: a.out == unknown}
		ret := a.ret
		if a.out == unknown {
			p, ok := finalPos[a.data]
			if !ok {
				continue
			}
			in.pos, ret = p, math.MaxInt64
		}
		ops = append(ops, porcupine.Operation{ClientId: a.inc, Input: in, Call: a.call, Return: ret})
	}
	for _, r := range w.h.reads {
		if r.cell == cell && r.barrier {
			ops = append(ops, porcupine.Operation{ClientId: r.inc, Input: readIn{after: int(r.after)}, Output: joined(r.recs), Call: r.call, Return: r.ret})
		}
	}
	end := w.h.now()
	ops = append(ops, porcupine.Operation{ClientId: 0, Input: readIn{}, Output: joined(w.final[cell]), Call: end, Return: end + 1})
	model := logModel.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, ops, 30*time.Second)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return []string{fmt.Sprintf("%s: porcupine timed out on %d operations", cell, len(ops))}
	}
	msg := fmt.Sprintf("%s: the history of its log (%d operations) is not linearizable", cell, len(ops))
	path := filepath.Join(os.TempDir(), fmt.Sprintf("deed-sim-seed%d-%s.html", w.seed, cell))
	if err := porcupine.VisualizePath(model, info, path); err == nil {
		msg += "; visualisation: " + path
	}
	return []string{msg}
}
