package replication

import (
	"context"
	"sync"
)

// Read-ahead for chain walks.
//
// A walk reads one slot after the other, and each read is a round trip: a
// restore of 10,000 transactions took 10,000 RTTs, over three minutes at
// 20 ms (BenchmarkRestore). Yet while an epoch's chain goes on, the next
// keys are known in advance: after a record at (E, T) come (E, T+1),
// (E, T+2), … So the walk asks for them ahead, several at once, and still
// consumes them strictly in slot order with the same restore rule. Slot
// files are create-only and never change once written, so a file read a
// moment early is the file a later read would return; a slot read early as
// missing ends the walk exactly as a sequential read at that moment would
// have (the walk's result is a view of the chain as of its reads, as
// before). Nothing is concluded from a read the walk does not consume.
//
// A walk reads its first readAheadAfter slots of an epoch one at a time,
// as before, so a short read costs exactly the GETs it needs. After that
// the window is the number of records read in a row in this epoch (so it
// about doubles every round trip), up to maxReadAhead and within
// readAheadBytes of buffered files; a seal, a tombstone, a missing slot or
// an error resets it. The reads wasted past the chain's end (404s) are at
// most the window: never more than the reads the walk used.

const (
	readAheadAfter = 8
	maxReadAhead   = 32
	readAheadBytes = 16 << 20
)

// readAhead serves a walk's slot reads.
type readAhead struct {
	s      *store
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	run    int // records read in a row in this epoch
	// ahead holds reads in flight for (epoch, next), (epoch, next+1), …
	epoch uint64
	next  TxID
	ahead []*slotRead
}

// slotRead is one read in flight; done is closed when f, size and err are set.
type slotRead struct {
	done chan struct{}
	f    *File
	size int
	err  error
}

func (s *store) readAhead(ctx context.Context) *readAhead {
	ctx, cancel := context.WithCancel(ctx)
	return &readAhead{s: s, ctx: ctx, cancel: cancel}
}

// close abandons the reads still in flight and waits for them to return.
func (r *readAhead) close() {
	r.cancel()
	r.wg.Wait()
}

func (r *readAhead) start(epoch uint64, txid TxID) *slotRead {
	sr := &slotRead{done: make(chan struct{})}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(sr.done)
		var body []byte
		sr.f, body, sr.err = r.s.read(r.ctx, SlotKey(r.s.cell, epoch, txid))
		sr.size = len(body)
	}()
	return sr
}

// read returns the file at slot c (nil when missing), like store.read.
func (r *readAhead) read(c cursor) (*File, error) {
	var sr *slotRead
	if len(r.ahead) > 0 && c.epoch == r.epoch && c.txid == r.next {
		sr = r.ahead[0]
		r.ahead = r.ahead[1:]
	} else {
		r.ahead = nil // not on the path read ahead: leave those reads to close
		sr = r.start(c.epoch, c.txid)
	}
	r.epoch, r.next = c.epoch, c.txid+1
	<-sr.done
	if sr.err != nil || sr.f == nil || sr.f.Kind != KindRecords {
		r.run, r.ahead = 0, nil
		return sr.f, sr.err
	}
	// A record: the chain goes on in this epoch. Keep the window full.
	r.run++
	window := 0
	if r.run >= readAheadAfter {
		window = min(r.run, maxReadAhead, max(1, readAheadBytes/max(sr.size, 1)))
	}
	for n := len(r.ahead); n < window; n++ {
		r.ahead = append(r.ahead, r.start(c.epoch, r.next+TxID(n)))
	}
	return sr.f, nil
}
