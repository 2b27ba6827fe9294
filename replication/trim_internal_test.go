package replication

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
)

// trimModel explores every interleaving of writers of one trim point —
// an old owner, a new one after a takeover, another node — each reading
// the point and writing its own value conditionally on the version read
// (RaiseTrim's loop), where a write may also be left in flight with its
// outcome unknown and land at any later moment (or never). It reports
// whether the point ever moved back, and whether every run ended at the
// highest value asked for. States seen once are not explored again.
type trimReg struct {
	val Pos
	ver int
}

type trimWriter struct {
	want     Pos
	pc       int // 0: read next; 1: write next; 2: done
	readVer  int
	rounds   int
	inFlight bool // an ambiguous write of this writer not delivered yet
	flightV  int  // the version it is conditional on
}

func exploreTrim(t *testing.T, start Pos, wants []Pos, unconditional bool) (movedBack, wrongEnd bool, runs int) {
	t.Helper()
	seen := map[string]bool{}
	var walk func(reg trimReg, ws []trimWriter)
	walk = func(reg trimReg, ws []trimWriter) {
		k := fmt.Sprint(reg, ws)
		if seen[k] {
			return // explored already (each transition's check ran then)
		}
		seen[k] = true
		progressed := false
		step := func(next trimReg, nws []trimWriter) {
			progressed = true
			if next.val < reg.val {
				movedBack = true
			}
			walk(next, nws)
		}
		for i := range ws {
			w := ws[i]
			if w.inFlight { // the lost write lands now (or is dropped)
				for _, land := range []bool{true, false} {
					nws := append([]trimWriter(nil), ws...)
					nws[i].inFlight = false
					next := reg
					if land && (unconditional || reg.ver == w.flightV) {
						next = trimReg{val: w.want, ver: reg.ver + 1}
					}
					step(next, nws)
				}
			}
			switch w.pc {
			case 0:
				nws := append([]trimWriter(nil), ws...)
				if !raiseTrim(reg.val, w.want) || w.rounds >= 3 {
					nws[i].pc = 2
				} else {
					nws[i].pc, nws[i].readVer = 1, reg.ver
				}
				step(reg, nws)
			case 1:
				// The write lands now, is refused (412), or stays in flight
				// with its outcome unknown: the writer reads again.
				nws := append([]trimWriter(nil), ws...)
				nws[i].pc, nws[i].rounds = 0, w.rounds+1
				next := reg
				if unconditional || reg.ver == w.readVer {
					next = trimReg{val: w.want, ver: reg.ver + 1}
					nws[i].pc = 2
				}
				step(next, nws)
				if !w.inFlight {
					nws := append([]trimWriter(nil), ws...)
					nws[i].pc, nws[i].rounds = 0, w.rounds+1
					nws[i].inFlight, nws[i].flightV = true, w.readVer
					step(reg, nws)
				}
			}
		}
		if !progressed {
			runs++
			highest := start
			for _, w := range ws {
				highest = max(highest, w.want)
			}
			if reg.val != highest && ws[0].rounds < 3 && ws[1].rounds < 3 {
				wrongEnd = true
			}
		}
	}
	ws := make([]trimWriter, len(wants))
	for i, w := range wants {
		ws[i] = trimWriter{want: w}
	}
	walk(trimReg{val: start, ver: 1}, ws)
	return movedBack, wrongEnd, runs
}

// The trim point never moves back under any interleaving of three writers
// (two owners across a takeover and a third node), lost writes that land
// late included, and ends at the highest value asked for; an
// unconditional write (the broken variant) moves it back.
func TestTrimPointNeverMovesBackModel(t *testing.T) {
	back, wrong, runs := exploreTrim(t, 2, []Pos{5, 3, 4}, false)
	if back || wrong {
		t.Fatalf("conditional raise: moved back %v, wrong end %v over %d runs", back, wrong, runs)
	}
	if runs < 10 {
		t.Fatalf("only %d runs explored: the model is broken", runs)
	}
	if back, _, _ := exploreTrim(t, 2, []Pos{5, 3, 4}, true); !back {
		t.Fatal("the model did not catch an unconditional write moving the point back")
	}
}

// RaiseTrim on a real (in-memory) store: it raises, never lowers, and a
// 412 or an ambiguous write is answered by reading again.
func TestRaiseTrim(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	b := m.Client("a")
	if p, _, err := ReadTrim(ctx, b, "c"); err != nil || p != 0 {
		t.Fatalf("no trim point: %d %v", p, err)
	}
	for _, c := range []struct{ ask, want Pos }{{5, 5}, {3, 5}, {9, 9}, {9, 9}} {
		got, err := RaiseTrim(ctx, b, "c", c.ask)
		if err != nil || got != c.want {
			t.Fatalf("raise to %d: %d %v, want %d", c.ask, got, err, c.want)
		}
	}
	m.Inject(fakes3.Rule{Op: fakes3.OpPut, KeyPrefix: TrimKey("c"), Fault: fakes3.ErrAfter, Times: 1})
	if got, err := RaiseTrim(ctx, b, "c", 12); err != nil || got != 12 {
		t.Fatalf("raise through a lost answer: %d %v", got, err)
	}
	if p, _, _ := ReadTrim(ctx, b, "c"); p != 12 {
		t.Fatalf("trim point %d, want 12", p)
	}
	m.Set(TrimKey("c"), []byte("not json"))
	if _, err := RaiseTrim(ctx, b, "c", 20); err == nil || errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("corrupt trim point: %v", err)
	}
}

// A raise whose write's answer was lost and whose read back then fails
// may have landed: it answers DEED-E012 (applied unknown), not a refusal;
// a raise that failed before any write was sent answers DEED-E011.
func TestRaiseTrimInDoubtIsUnknown(t *testing.T) {
	ctx := context.Background()
	m := fakes3.NewMem()
	b := m.Client("a")
	m.Inject(fakes3.Rule{Op: fakes3.OpGet, KeyPrefix: TrimKey("c"), Fault: fakes3.ErrBefore, Times: 1})
	if _, err := RaiseTrim(ctx, b, "c", 5); errcode.CodeOf(err) == errcode.CodeAmbiguous || err == nil {
		t.Fatalf("a read that failed before any write: %v, want a refusal (applied no)", err)
	}
	m.Inject(fakes3.Rule{Op: fakes3.OpPut, KeyPrefix: TrimKey("c"), Fault: fakes3.ErrAfter, Times: 1})
	m.Inject(fakes3.Rule{Op: fakes3.OpGet, KeyPrefix: TrimKey("c"), Fault: fakes3.ErrBefore, Skip: 1})
	_, err := RaiseTrim(ctx, b, "c", 7)
	if errcode.CodeOf(err) != errcode.CodeAmbiguous {
		t.Fatalf("a lost write, then a failed read back: %v, want DEED-E012", err)
	}
	m.ClearFaults()
	if p, _, _ := ReadTrim(ctx, b, "c"); p != 7 {
		t.Fatalf("the write in doubt landed at %d, want 7", p)
	}
}
