package simulation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/internal/wait"
	"github.com/deedkit/deed/replication"
)

// Snapshots and GC in the simulation.
//
// The application state a snapshot holds is the log itself: every record
// up to the snapshot's txid (position, epoch, txid, data), under a header
// with their count and a hash. It is a deterministic function of those
// records, like any state machine's, and the strongest one a checker can
// verify: the records a snapshot claims to cover are in it, so the final
// restore — the newest snapshot, then the records after it — is still the
// whole log, and every check written for a log without GC (each
// acknowledged record exactly once, at its position, in order; porcupine)
// holds on it unchanged.

// encodeState is the state of a snapshot covering recs.
func encodeState(recs []replication.Record) []byte {
	var body bytes.Buffer
	for _, r := range recs {
		fmt.Fprintf(&body, "%d %d %d %s\n", r.Pos, r.Epoch, r.TxID, r.Data)
	}
	h := fnv.New64a()
	h.Write(body.Bytes())
	return append(fmt.Appendf(nil, "deed-sim state n=%d fnv=%016x\n", len(recs), h.Sum64()), body.Bytes()...)
}

// decodeState parses a state and verifies its count and hash.
func decodeState(state []byte) ([]replication.Record, error) {
	head, body, ok := bytes.Cut(state, []byte("\n"))
	var n int
	var sum uint64
	if !ok {
		return nil, fmt.Errorf("state without a header")
	}
	if _, err := fmt.Sscanf(string(head), "deed-sim state n=%d fnv=%x", &n, &sum); err != nil {
		return nil, fmt.Errorf("state header %q: %v", head, err)
	}
	h := fnv.New64a()
	h.Write(body)
	if h.Sum64() != sum {
		return nil, fmt.Errorf("state hash %016x, header says %016x", h.Sum64(), sum)
	}
	var recs []replication.Record
	for _, line := range strings.Split(strings.TrimSuffix(string(body), "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 {
			return nil, fmt.Errorf("state line %q", line)
		}
		pos, e1 := strconv.ParseUint(f[0], 10, 64)
		epoch, e2 := strconv.ParseUint(f[1], 10, 64)
		txid, e3 := strconv.ParseUint(f[2], 10, 64)
		if err := errors.Join(e1, e2, e3); err != nil {
			return nil, fmt.Errorf("state line %q: %v", line, err)
		}
		recs = append(recs, replication.Record{Pos: replication.Pos(pos), Epoch: epoch, TxID: replication.TxID(txid), Data: []byte(f[3])})
	}
	if len(recs) != n {
		return nil, fmt.Errorf("state holds %d records, header says %d", len(recs), n)
	}
	return recs, nil
}

// snapshot has the cell's owner (as for an append: the log on some node)
// snapshot its log, the way an application does: rebuild the state from
// the newest snapshot and the records after it, then write it at a
// durable txid. The txid is s.frac of the way from the newest snapshot (or
// the log's start, if later) to the log's head; with s.atStart it is the
// slot before the log's start, and the state is rebuilt with Log.Restore,
// which is for exactly that.
//
// The restore is itself a read of the log, and is checked as one.
func (w *world) snapshot(ctx context.Context, n *simNode, cell string, s step) {
	inc, cl := w.peekHolder(n, cell)
	if cl == nil {
		return
	}
	start, head := cl.log.Start(), cl.log.Head()
	lo, hi := max(start.Next-1, 1), head.Next-1 // the txids Log.Snapshot takes
	if s.atStart {
		hi = start.Next - 1
	}
	if hi < lo {
		return
	}
	var base *replication.Snapshot
	var view []replication.Record
	onSnap := func(sn replication.Snapshot) error { base = &sn; return nil }
	onRec := func(r replication.Record) error { view = append(view, r); return nil }
	call := w.h.now()
	var err error
	if s.atStart {
		err = cl.log.Restore(ctx, onSnap, onRec)
	} else {
		_, err = replication.Restore(ctx, inc.b, cell, onSnap, onRec, w.logOpts()...)
	}
	if err != nil {
		w.readFailed(cell, inc, "restore for a snapshot", err)
		return
	}
	var prefix []replication.Record
	if base != nil {
		if prefix, err = decodeState(base.State); err != nil {
			w.h.violate("%s: snapshot %s holds a damaged state: %v", cell, base.Key, err)
			return
		}
	}
	all := append(append([]replication.Record(nil), prefix...), view...)
	r := &readOp{cell: cell, inc: inc.id, src: "restore", call: call, ret: w.h.now(), recs: all}
	if s.atStart {
		r.until = start.NextPos
	}
	w.h.addRead(r)
	if base != nil {
		lo = max(lo, base.TxID)
	}
	if hi < lo {
		w.h.logf("snapshot %s e%d by %s: the newest snapshot %s is past tx %d", cell, cl.lease.Epoch(), inc.client, base.Key, hi)
		return
	}
	upTo := lo + replication.TxID(s.frac)*(hi-lo)/1000
	var recs []replication.Record
	for _, r := range all {
		if r.TxID <= upTo {
			recs = append(recs, r)
		}
	}
	op := &snapOp{cell: cell, inc: inc.id, key: replication.SnapshotKey(cell, cl.lease.Epoch(), upTo), epoch: cl.lease.Epoch(),
		upTo: upTo, recs: recs, state: encodeState(recs)}
	w.h.addSnap(op) // before the write: an unknown outcome may land
	snap, err := cl.log.Snapshot(ctx, cl.lease, upTo, op.state)
	if err != nil {
		op.err = err
		w.h.logf("snapshot %s e%d tx %d by %s: %s", cell, cl.lease.Epoch(), upTo, inc.client, shortErr(err))
		return
	}
	op.nextPos = snap.NextPos
	w.h.logf("snapshot %s e%d tx %d by %s: %d records, next pos %d", cell, cl.lease.Epoch(), upTo, inc.client, len(recs), snap.NextPos)
}

// gc runs replication.GC on the cell from a node (its client, with every
// fault the node suffers) or from an out-of-band operator (a client no
// node's fault reaches). Either way every request of the run takes s.lat:
// a real GC pays a round trip per file it deletes, and it is while it
// deletes that walks meet the holes it makes.
func (w *world) gc(ctx context.Context, n *simNode, cell string, s step) {
	b := &gcClient{b: w.mem.Client("operator"), lat: s.lat, stall: s.stall}
	by := "operator"
	if !s.operator {
		inc := n.peek()
		if inc == nil {
			return
		}
		b.b, by = inc.b, inc.client
	}
	rep, err := replication.GC(ctx, b, cell, replication.GCOptions{}, w.logOpts()...)
	w.h.addGC(&gcOp{cell: cell, by: by, deleted: len(rep.Deleted), err: err})
	if err != nil {
		if errcode.CodeOf(err) == errcode.CodeCorruptTx {
			// Nothing in the simulation damages a file.
			w.h.violate("%s: gc by %s found a damaged file: %v", cell, by, err)
		}
		w.h.logf("gc %s by %s: %d deleted, then %s", cell, by, len(rep.Deleted), shortErr(err))
		return
	}
	w.h.logf("gc %s by %s: snapshot %s, %d deleted %s, %d markers kept", cell, by, rep.Snapshot, len(rep.Deleted), shortKeys(rep.Deleted), rep.Markers)
}

// shortKeys names deleted files briefly in the trace: e<epoch>/<txid>,
// with a trailing "s" for a snapshot.
func shortKeys(keys []string) string {
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		if j := strings.Index(k, "/ltx/"); j >= 0 {
			k = k[j+len("/ltx/"):]
		}
		k = strings.Replace(strings.TrimSuffix(k, ".ltx"), ".snapshot", "s", 1)
		if e, t, ok := strings.Cut(k, "/"); ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(t, "s"), 16, 64); err == nil {
				k = fmt.Sprintf("%s/%d%s", e, n, t[len(strings.TrimSuffix(t, "s")):])
			}
		}
		b.WriteString(k)
	}
	return "[" + b.String() + "]"
}

// peek is the node's running incarnation, like current, but it never
// restarts a fenced one: snapshots and GC only look. Restarts happen where
// they always did (the steps of the main stream), so adding snapshots and
// GC moved no restart of any older seed.
func (n *simNode) peek() *incarnation {
	n.mu.Lock()
	inc := n.cur
	n.mu.Unlock()
	if inc == nil || inc.node.Err() != nil {
		return nil
	}
	return inc
}

// peekHolder is holder without its side effect (see peek): the incarnation
// with a log open on cell that the step's node index picks.
func (w *world) peekHolder(n *simNode, cell string) (*incarnation, *cellLog) {
	var cands []*incarnation
	for _, m := range w.nodes {
		if inc := m.peek(); inc != nil && inc.log(cell) != nil {
			cands = append(cands, inc)
		}
	}
	if len(cands) == 0 {
		return nil, nil
	}
	inc := cands[n.idx%len(cands)]
	return inc, inc.log(cell)
}

// readFailed logs a read or restore that failed. Failing is allowed (a
// race with GC, an unreachable store, a fenced owner): the promise is only
// that a read never returns wrong or missing records silently. A damaged
// chain is a broken promise, though: nothing in the simulation damages a
// file, so DEED-E031 (a record where the chain expects another position,
// say) means the chain itself is wrong.
func (w *world) readFailed(cell string, inc *incarnation, what string, err error) {
	if errcode.CodeOf(err) == errcode.CodeCorruptTx {
		w.h.violate("%s: %s by %s found a damaged chain: %v", cell, what, inc.client, err)
	}
	w.h.logf("%s %s by %s: %s", what, cell, inc.client, shortErr(err))
}

// gcClient is the bucket of a GC run: each request takes lat before it is
// sent, and the first DELETE waits stall more — a GC that listed, then
// stalled (a paused process, a slow network), and deletes from an old
// listing while claims, fencing walks and reads go on.
type gcClient struct {
	b          bucket.Bucket
	lat, stall time.Duration
	stalled    atomic.Bool
}

func (o *gcClient) delay(ctx context.Context, op fakes3.Op, key string) error {
	d := o.lat
	if op == fakes3.OpDelete && !o.stalled.Swap(true) {
		d += o.stall
	}
	if err := wait.Sleep(ctx, d); err != nil {
		return bucket.Classify(strings.ToLower(string(op)), key, bucket.None, 0, "", err)
	}
	return nil
}

func (o *gcClient) Get(ctx context.Context, key string, max int64) (bucket.Object, error) {
	if err := o.delay(ctx, fakes3.OpGet, key); err != nil {
		return bucket.Object{}, err
	}
	return o.b.Get(ctx, key, max)
}

func (o *gcClient) Head(ctx context.Context, key string) (bucket.Info, error) {
	if err := o.delay(ctx, fakes3.OpHead, key); err != nil {
		return bucket.Info{}, err
	}
	return o.b.Head(ctx, key)
}

func (o *gcClient) Put(ctx context.Context, key string, body []byte, cond bucket.Condition) (string, error) {
	if err := o.delay(ctx, fakes3.OpPut, key); err != nil {
		return "", err
	}
	return o.b.Put(ctx, key, body, cond)
}

func (o *gcClient) Delete(ctx context.Context, key string, cond bucket.Condition) error {
	if err := o.delay(ctx, fakes3.OpDelete, key); err != nil {
		return err
	}
	return o.b.Delete(ctx, key, cond)
}

func (o *gcClient) List(ctx context.Context, in bucket.ListInput) (bucket.ListPage, error) {
	if err := o.delay(ctx, fakes3.OpList, in.Prefix); err != nil {
		return bucket.ListPage{}, err
	}
	return o.b.List(ctx, in)
}

// markerWatch notes every DELETE that reaches the store while its key
// holds a seal or tombstone. GC must never delete one: they keep a paused
// owner fenced forever. A delete that names an older version (If-Match)
// fails and leaves the marker, so the check at the end looks whether the
// marker is still there rather than judging the request.
type markerWatch struct {
	mu   sync.Mutex
	keys []string
}

func (w *world) watchMarkers() {
	w.mem.Inject(fakes3.Rule{Op: fakes3.OpDelete, Match: func(_ fakes3.Op, key string) bool {
		if isMarker(w.mem, key) {
			w.markers.mu.Lock()
			w.markers.keys = append(w.markers.keys, key)
			w.markers.mu.Unlock()
		}
		return false // never a fault: the rule only watches
	}})
}

func isMarker(m *fakes3.Mem, key string) bool {
	if !strings.HasSuffix(key, ".ltx") {
		return false
	}
	body, ok := m.Bytes(key)
	if !ok {
		return false
	}
	f, err := replication.Decode(key, body)
	return err == nil && f.Kind != replication.KindRecords
}

// checkMarkers: no seal or tombstone was ever deleted, and in every epoch
// the markers sit above all its records. A marker ends its epoch's chain —
// a seal at the epoch's end, a tombstone where it never wrote — so a
// record above one means a walker took a hole (a file GC deleted under it)
// for the end of the chain and sealed the middle of it.
func (w *world) checkMarkers(cell string) []string {
	var v []string
	w.markers.mu.Lock()
	keys := append([]string(nil), w.markers.keys...)
	w.markers.mu.Unlock()
	gone := map[string]bool{}
	for _, k := range keys {
		if strings.HasPrefix(k, replication.LogPrefix(cell)) && !isMarker(w.mem, k) && !gone[k] {
			gone[k] = true
			v = append(v, fmt.Sprintf("%s: seal or tombstone %s was deleted", cell, k))
		}
	}
	type span struct{ maxRecord, minMarker replication.TxID }
	epochs := map[uint64]*span{}
	for _, f := range w.files[cell] {
		e := epochs[f.Epoch]
		if e == nil {
			e = &span{minMarker: ^replication.TxID(0)}
			epochs[f.Epoch] = e
		}
		if f.Kind == replication.KindRecords {
			e.maxRecord = max(e.maxRecord, f.TxID)
		} else {
			e.minMarker = min(e.minMarker, f.TxID)
		}
	}
	for epoch, e := range epochs {
		if e.minMarker < e.maxRecord {
			v = append(v, fmt.Sprintf("%s: epoch %d has a %s at tx %d below its record at tx %d: a seal in the middle of its chain",
				cell, epoch, "seal or tombstone", e.minMarker, e.maxRecord))
		}
	}
	return v
}

// checkSnapshots: every snapshot covers exactly the records up to its
// txid — contiguous positions from 1, no record above its txid, the next
// record of the log above it, and Log.Snapshot's position after it equal
// to the count — and two snapshots at one key hold one state. The records
// in a snapshot are the records of the final log at those positions:
// checkReads sees to that, since every snapshot's restore is recorded as
// a read. The final log's snapshot must hold a state the simulation wrote.
func (w *world) checkSnapshots(cell string) []string {
	var v []string
	final := w.final[cell]
	states := map[string][]byte{}
	for _, s := range w.h.snaps {
		if s.cell != cell {
			continue
		}
		if old, ok := states[s.key]; ok && !bytes.Equal(old, s.state) {
			v = append(v, fmt.Sprintf("%s: two snapshots for %s cover different records", cell, s.key))
		}
		states[s.key] = s.state
		for i, r := range s.recs {
			if r.Pos != replication.Pos(i+1) || r.TxID > s.upTo {
				v = append(v, fmt.Sprintf("%s: snapshot %s's record %d is at pos %d tx %d", cell, s.key, i+1, r.Pos, r.TxID))
				break
			}
		}
		if s.err == nil && s.nextPos != replication.Pos(len(s.recs)+1) {
			v = append(v, fmt.Sprintf("%s: snapshot %s covers %d records, Log.Snapshot says the next position is %d", cell, s.key, len(s.recs), s.nextPos))
		}
		if n := len(s.recs); n < len(final) && final[n].TxID <= s.upTo {
			v = append(v, fmt.Sprintf("%s: snapshot %s (tx ≤ %d) lacks the record at pos %d tx %d", cell, s.key, s.upTo, final[n].Pos, final[n].TxID))
		}
	}
	snap := w.finalSnap[cell]
	if snap == nil {
		return v
	}
	if st, ok := states[snap.Key]; !ok || !bytes.Equal(st, snap.State) {
		v = append(v, fmt.Sprintf("%s: the final snapshot %s holds a state the simulation never wrote there", cell, snap.Key))
	}
	n := int(snap.NextPos) - 1
	if n > len(final) {
		v = append(v, fmt.Sprintf("%s: the final snapshot %s says the next position is %d; the log has %d records", cell, snap.Key, snap.NextPos, len(final)))
		return v
	}
	if n > 0 && final[n-1].TxID > snap.TxID {
		v = append(v, fmt.Sprintf("%s: the final snapshot %s (tx ≤ %d) ends with a record of tx %d", cell, snap.Key, snap.TxID, final[n-1].TxID))
	}
	if n < len(final) && final[n].TxID <= snap.TxID {
		v = append(v, fmt.Sprintf("%s: the final restore goes on after snapshot %s (tx ≤ %d) with a record of tx %d", cell, snap.Key, snap.TxID, final[n].TxID))
	}
	return v
}

// protoLog is where the protocol's own log goes in the simulation: the
// events that explain a chain — a seal or tombstone placed, a fencing walk
// that met a hole GC made and started again — become lines of the trace,
// and the restarts are counted, so the statistics show how often the
// simulation drove a walk into GC's ordering argument.
type protoLog struct{ h *history }

func (p protoLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (p protoLog) WithAttrs([]slog.Attr) slog.Handler           { return p }
func (p protoLog) WithGroup(string) slog.Handler                { return p }

func (p protoLog) Handle(_ context.Context, r slog.Record) error {
	switch r.Message {
	case "fencing walk raced with GC; starting again":
		p.h.gcRaces.Add(1)
	case "fenced predecessor":
	default:
		return nil
	}
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	p.h.logf("%s", b.String())
	return nil
}
