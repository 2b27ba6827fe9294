package owner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/internal/wait"
)

// ClaimOptions modify a claim.
type ClaimOptions struct {
	// Force overrides the owner's liveness (and a corrupt record). It is an
	// operator action: safe for data, because the new owner seals the old
	// epoch before writing, but it cuts a live owner off mid-work.
	Force bool
}

// HeldError is DEED-E020: a live node holds the cell.
type HeldError struct {
	Cell  string
	Owner string
	Addr  string
	Epoch uint64
}

func (e *HeldError) Error() string {
	addr := e.Addr
	if addr == "" {
		addr = "unknown address"
	}
	return fmt.Sprintf("%s cell %s is held by live node %s (%s) at epoch %d", errcode.CodeHeld, e.Cell, e.Owner, addr, e.Epoch)
}

// ErrorCode makes errcode.CodeOf report DEED-E020.
func (e *HeldError) ErrorCode() errcode.Code { return errcode.CodeHeld }

// Claim makes this node the owner of cell for a new epoch, following
// the claim rule (docs/design.md, "Claiming a cell"): create when absent; take over (If-Match, epoch+1) when
// released, when the record names this node, or when its owner is dead;
// refuse with DEED-E020 otherwise unless forced.
//
// A 412 means someone wrote between our read and our write: read and
// decide again (bounded). A 409 backs off first. Any other failure of the
// conditional write is ambiguous — it may have landed — so the record is
// read back: if it carries our nonce the claim applied, else decide again.
// The claim is never applied twice, because each attempt's If-Match names
// the version it read.
//
// When the write can be guessed without reading — a cell this node knows
// nothing about, or one it released itself — it is sent first (see
// claimFirst): one round trip instead of two.
func (n *Node) Claim(ctx context.Context, cell string, opts ClaimOptions) (*Lease, error) {
	if err := ValidateName("cell", cell); err != nil {
		return nil, err
	}
	if err := n.Err(); err != nil {
		return nil, errcode.Wrap(err, "claim %s", cell)
	}
	l, reason, err := n.claim(ctx, cell, opts)
	if n.cfg.Hooks.Claim != nil {
		result := "ok"
		switch errcode.CodeOf(err) {
		case "":
		case errcode.CodeHeld:
			result = "held"
		case errcode.CodeCorruptOwner:
			result = "corrupt"
		default:
			result = "error"
		}
		n.cfg.Hooks.Claim(cell, result, reason)
	}
	return l, err
}

func (n *Node) claim(ctx context.Context, cell string, opts ClaimOptions) (*Lease, string, error) {
	if l, reason, err, done := n.claimFirst(ctx, cell, opts); done {
		return l, reason, err
	}
	key := CellKey(cell)
	p := n.cfg.params()
	var lastErr error
	for attempt := 0; attempt < n.cfg.ClaimAttempts; attempt++ {
		cur, etag, err := n.read(ctx, cell)
		if err != nil {
			return nil, "", errcode.Wrap(err, "claim %s", cell)
		}
		// Liveness is judged as of now, before the owner's lease is read:
		// an answer describes the lease when the store served it, and the
		// owner may have renewed while a slow answer travelled back.
		now := time.Now()
		var owner Observation
		if cur.Exists && !cur.Corrupt && !cur.Record.Released() && cur.Record.Node != n.cfg.Name {
			if owner, err = n.obs.observe(ctx, cur.Record.Node, cur.Record.Inc); err != nil {
				return nil, "", errcode.Wrap(err, "claim %s", cell)
			}
		}
		if cur.Corrupt && opts.Force {
			if cur.DataEpoch, err = newestDataEpoch(ctx, n.b, cell); err != nil {
				return nil, "", errcode.Wrap(err, "claim %s", cell)
			}
			// Epoch 1 writes without an announcement (its claim created
			// own.json, see replication.Open), so a log that shows no
			// epoch may still have a live epoch 1: never claim it again.
			cur.DataEpoch = max(cur.DataEpoch, 1)
		}
		if brokenWallClockDeath {
			owner = judgeByWallClock(owner, now, n.cfg.WallClock())
		}
		d := Decide(cur, n.cfg.Name, owner, now, p, opts.Force)
		switch d.Action {
		case RefuseCorrupt:
			if d.Reason == ReasonEpochOverflow {
				return nil, d.Reason, errcode.Errorf(errcode.CodeCorruptOwner, "claim %s: corrupt ownership record %s: epoch %d (data epoch %d) has no successor; nothing written",
					cell, key, cur.Record.Epoch, cur.DataEpoch)
			}
			return nil, d.Reason, errcode.Wrap(cur.parseErr(key), "claim %s", cell)
		case Refuse:
			return nil, d.Reason, &HeldError{Cell: cell, Owner: cur.Record.Node, Addr: owner.Addr, Epoch: cur.Record.Epoch}
		}
		rec := Record{Node: n.cfg.Name, Epoch: d.Epoch, Nonce: newNonce(), AtMS: n.cfg.WallClock().UnixMilli(), Inc: n.leaseIncarnation()}
		// A claim that takes a released end announces its epoch in its
		// record; every other carries what the record it replaces says
		// (see Record.Announces).
		var prev *PrevEnd
		var unmarked uint64
		if cur.Exists && !cur.Corrupt {
			var end *End
			if cur.Record.Released() {
				end = cur.Record.End
			}
			unmarked = cur.Record.Announces
			if rec.succeed(cur.Record.Epoch, cur.Record.Announces, end) {
				prev = &PrevEnd{Epoch: cur.Record.Epoch, End: *end}
			}
		}
		body := rec.marshal()
		cond := bucket.IfAbsent
		if cur.Exists {
			cond = bucket.IfMatch(etag)
		}
		sealRead := n.readSealAhead(ctx, cell, prev)
		newETag, err := n.b.Put(ctx, key, body, cond)
		sealRead()
		switch {
		case err == nil:
		case errors.Is(err, bucket.ErrPrecondition):
			lastErr = err
			n.log.Debug("claim raced; deciding again", "cell", cell, "attempt", attempt)
			continue
		case errors.Is(err, bucket.ErrConflict):
			lastErr = err
			if err := wait.Sleep(ctx, wait.Backoff{Min: backoffStep(p), Max: backoffStep(p) << 5}.Delay(attempt)); err != nil {
				return nil, "", errcode.Wrap(err, "claim %s", cell)
			}
			continue
		case bucket.Permanent(err):
			// Refused as such (credentials, an endpoint that is not S3):
			// nothing was written.
			return nil, "", errcode.Wrap(err, "claim %s", cell)
		default:
			// Ambiguous (or transient): the write may have landed.
			lastErr = err
			applied, got, rerr := n.reconcile(ctx, key, rec)
			if errors.Is(rerr, bucket.ErrNoBucket) {
				// No bucket, so no record: the write cannot have landed.
				return nil, "", errcode.Wrap(rerr, "claim %s", cell)
			}
			if rerr != nil {
				return nil, "", errcode.Errorf(errcode.CodeAmbiguous, "claim %s: outcome unknown: %v (read back: %w)", cell, err, rerr)
			}
			if !applied {
				continue
			}
			newETag = got
		}
		l := n.mint(cell, rec, newETag, !cur.Exists, prev, unmarked)
		if err := l.Err(); err != nil {
			// The record names this node at rec.Epoch, but the node stopped
			// acting before the claim landed; peers take the cell over once
			// they see it dead.
			return nil, d.Reason, errcode.Wrap(err, "claim %s", cell)
		}
		n.log.Info("claimed", "cell", cell, "epoch", rec.Epoch, "reason", d.Reason, "prev_node", cur.Record.Node)
		return l, d.Reason, nil
	}
	return nil, "", errcode.Errorf(errcode.CodeUnavailable, "claim %s: gave up after %d attempts: %w", cell, n.cfg.ClaimAttempts, lastErr)
}

// read returns own.json as a Current plus its ETag.
func (n *Node) read(ctx context.Context, cell string) (Current, string, error) {
	key := CellKey(cell)
	obj, err := getRecord(ctx, n.b, key, "ownership record")
	if err == nil || errors.Is(err, bucket.ErrNotFound) {
		n.mu.Lock()
		n.hints.readOwn(cell, err == nil)
		n.mu.Unlock()
	}
	switch {
	case errors.Is(err, bucket.ErrNotFound):
		return Current{}, "", nil
	case errors.Is(err, bucket.ErrTooLarge):
		return Current{Exists: true, Corrupt: true}, obj.ETag, nil
	case err != nil:
		return Current{}, "", err
	}
	rec, perr := ParseRecord(key, obj.Body)
	return Current{Exists: true, Corrupt: perr != nil, Record: rec}, obj.ETag, nil
}

func (c Current) parseErr(key string) error {
	return errcode.Errorf(errcode.CodeCorruptOwner, "corrupt ownership record %s (use force to overwrite it)", key)
}

// reconcile reads the record back after an ambiguous write: it applied iff
// the record carries our nonce. Reads are retried with backoff; an error
// means the outcome could not be learned.
func (n *Node) reconcile(ctx context.Context, key string, want Record) (bool, string, error) {
	var err error
	for i := 0; i < 6; i++ {
		var obj bucket.Object
		obj, err = getRecord(ctx, n.b, key, "ownership record")
		switch {
		case err == nil:
			rec, perr := ParseRecord(key, obj.Body)
			return perr == nil && rec.Nonce == want.Nonce && rec.Epoch == want.Epoch, obj.ETag, nil
		case errors.Is(err, bucket.ErrTooLarge):
			return false, obj.ETag, nil // garbage, not our record
		case errors.Is(err, bucket.ErrNotFound):
			return false, "", nil
		}
		if serr := wait.Sleep(ctx, wait.Backoff{Min: backoffStep(n.cfg.params())}.Delay(i)); serr != nil {
			return false, "", serr
		}
	}
	return false, "", err
}

// mint constructs the lease for a claim that applied. A lease this node
// already held on the cell is superseded: re-entry fences it.
//
// A node that fenced or closed while the claim was in flight has already
// ended every lease it held, and peers may call it dead from then on: the
// new lease is born ended, with the node's error, never added to the held
// leases that nothing would end any more.
func (n *Node) mint(cell string, rec Record, etag string, created bool, prev *PrevEnd, unmarked uint64) *Lease {
	l := &Lease{cell: cell, epoch: rec.Epoch, nonce: rec.Nonce, etag: etag, rel: n, minted: true, created: created,
		announcesSelf: rec.Announces != 0 && rec.Announces == rec.Epoch}
	n.mu.Lock()
	if ferr := n.ferr; ferr != nil {
		n.mu.Unlock()
		l.end(ferr)
		return l
	}
	old := n.held[cell]
	n.held[cell] = l
	if unmarked != 0 {
		if n.unmarked == nil {
			n.unmarked = map[*Lease]uint64{}
		}
		n.unmarked[l] = unmarked
	}
	if prev != nil {
		if n.prevEnds == nil {
			n.prevEnds = map[*Lease]PrevEnd{}
		}
		n.prevEnds[l] = *prev
	}
	n.hints.drop(cell) // the lease knows its ETag while it is held
	n.mu.Unlock()
	if old != nil {
		old.end(errcode.Errorf(errcode.CodeSuperseded, "lease lost: cell %s epoch %d superseded by re-entry at epoch %d", cell, old.epoch, rec.Epoch))
	}
	return l
}

// releaseLease writes {node:"", epoch} with If-Match on the claim's ETag.
func (n *Node) releaseLease(ctx context.Context, l *Lease) error {
	defer l.markReleasing()()
	key := CellKey(l.cell)
	// A release that names its end clears Announces: the chain of this
	// epoch is sealed, and its log fenced every epoch below it first.
	// One without carries the claim record's on.
	rec := Record{Node: "", Epoch: l.epoch, Nonce: newNonce(), AtMS: n.cfg.WallClock().UnixMilli()}
	n.mu.Lock()
	rec.Announces = l.announcesLocked()
	sealed, ok := n.sealedAt[l]
	if ok {
		rec.End = &sealed.End
		rec.Announces = 0
	}
	n.mu.Unlock()
	etag, err := n.b.Put(ctx, key, rec.marshal(), bucket.IfMatch(l.etag))
	switch {
	case err == nil:
	case errors.Is(err, bucket.ErrPrecondition):
		l.Supersede(fmt.Errorf("own.json changed since the claim"))
		return l.Err()
	default:
		applied, got, rerr := n.reconcile(ctx, key, rec)
		if rerr != nil {
			return errcode.Errorf(errcode.CodeAmbiguous, "release %s: outcome unknown: %v (read back: %w)", l.cell, err, rerr)
		}
		if !applied {
			// Either it did not land (the record reconcile read is still
			// the claim's: the lease stays valid, the caller may retry) or
			// someone took over. No second read: its failure would be
			// mistaken for a takeover.
			if bucket.SameETag(got, l.etag) {
				return errcode.Wrap(err, "release %s", l.cell)
			}
			l.Supersede(fmt.Errorf("own.json changed since the claim"))
			return l.Err()
		}
		etag = got
	}
	// Remembered before the lease ends, so that this node's next claim of
	// the cell is one If-Match PUT on the version its release wrote.
	n.mu.Lock()
	n.hints.note(l.cell, Hint{Known: true, ReleasedETag: etag, Epoch: l.epoch, End: rec.End, Announces: rec.Announces, own: rec.End != nil, ts: sealed.ts}, false)
	n.mu.Unlock()
	l.end(errcode.Errorf(errcode.CodeReleased, "lease released: cell %s epoch %d", l.cell, l.epoch))
	n.log.Info("released", "cell", l.cell, "epoch", l.epoch)
	return nil
}

// With claims cell, runs fn with the lease, and always releases it, so a
// lease cannot be leaked by forgetting. fn's error wins over the release's.
// fn should watch l.Done() if it runs long: the lease can end under it —
// on an opened node also when another node takes the cell over, which the
// node's record watch notices within Config.WatchInterval (TTL/3).
func (n *Node) With(ctx context.Context, cell string, fn func(*Lease) error) (err error) {
	l, err := n.Claim(ctx, cell, ClaimOptions{})
	if err != nil {
		return err
	}
	defer func() {
		if l.Err() != nil {
			return // already ended: superseded or fenced
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.TTL)
		defer rcancel()
		if rerr := l.Release(rctx); rerr != nil && err == nil {
			err = rerr
		}
	}()
	return fn(l)
}

// ReleaseCell releases cell on behalf of node without a Lease in hand (the
// CLI's `deed release`). It refuses with DEED-E024 when node is not the
// holder, unless force is set. Releasing a released cell is a no-op.
func ReleaseCell(ctx context.Context, b bucket.Bucket, cell, node string, force bool) (Record, error) {
	if err := ValidateName("cell", cell); err != nil {
		return Record{}, err
	}
	key := CellKey(cell)
	for attempt := 0; attempt < 8; attempt++ {
		obj, err := getRecord(ctx, b, key, "ownership record")
		if errors.Is(err, bucket.ErrNotFound) {
			return Record{}, errcode.Errorf(errcode.CodeNotHolder, "release %s: cell was never claimed", cell)
		}
		if err != nil && !errors.Is(err, bucket.ErrTooLarge) {
			return Record{}, errcode.Wrap(err, "release %s", cell)
		}
		cur, perr := ParseRecord(key, obj.Body)
		if err != nil {
			cur, perr = Record{}, err // too large: garbage, like a record that does not parse
		}
		switch {
		case perr != nil && !force:
			return Record{}, errcode.Wrap(perr, "release %s", cell)
		case perr == nil && cur.Released():
			return cur, nil
		case perr == nil && cur.Node != node && !force:
			return cur, errcode.Errorf(errcode.CodeNotHolder, "release %s: not the holder: held by %s at epoch %d, not %s", cell, cur.Node, cur.Epoch, node)
		}
		rec := Record{Node: "", Epoch: cur.Epoch, Nonce: newNonce(), AtMS: time.Now().UnixMilli(), Announces: cur.Announces}
		if perr != nil {
			rec.Epoch = 1 // a forced release of garbage: the next claim starts above the data anyway
			if e, err := newestDataEpoch(ctx, b, cell); err == nil && e > 0 {
				rec.Epoch = e
			}
		}
		_, err = b.Put(ctx, key, rec.marshal(), bucket.IfMatch(obj.ETag))
		switch {
		case err == nil:
			return rec, nil
		case errors.Is(err, bucket.ErrPrecondition), errors.Is(err, bucket.ErrConflict):
			continue
		default:
			got, gerr := getRecord(ctx, b, key, "ownership record")
			if gerr == nil {
				if r, perr := ParseRecord(key, got.Body); perr == nil && r.Nonce == rec.Nonce {
					return rec, nil
				}
				continue
			}
			return Record{}, errcode.Errorf(errcode.CodeAmbiguous, "release %s: outcome unknown: %v", cell, err)
		}
	}
	return Record{}, errcode.Errorf(errcode.CodeUnavailable, "release %s: record kept changing", cell)
}

// Inspect reads a cell's ownership record. exists is false for a cell never
// claimed; a corrupt record is DEED-E030.
func Inspect(ctx context.Context, b bucket.Bucket, cell string) (rec Record, exists bool, err error) {
	if err := ValidateName("cell", cell); err != nil {
		return Record{}, false, err
	}
	obj, err := getRecord(ctx, b, CellKey(cell), "ownership record")
	if errors.Is(err, bucket.ErrNotFound) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, errcode.Wrap(err, "inspect %s", cell)
	}
	rec, err = ParseRecord(CellKey(cell), obj.Body)
	return rec, err == nil, err
}

// newestDataEpoch is the newest epoch the cell's log names: of a file in
// the canonical form deed writes (e<epoch>/<txid:016x>.ltx or .snapshot,
// the epoch in decimal without leading zeros) or of an announcement marker
// (announce/<epoch:020d>). Stray keys (other names, padding or case) are
// ignored: a forced claim must not jump to an epoch a stranger made up.
func newestDataEpoch(ctx context.Context, b bucket.Bucket, cell string) (uint64, error) {
	prefix := CellPrefix(cell) + "ltx/"
	page, err := bucket.ListAll(ctx, b, bucket.ListInput{Prefix: prefix})
	if err != nil {
		return 0, fmt.Errorf("list epochs of %s: %w", cell, err)
	}
	var newest uint64
	for _, o := range page.Objects {
		if e, ok := logKeyEpoch(strings.TrimPrefix(o.Key, prefix)); ok && e > newest {
			newest = e
		}
	}
	return newest, nil
}

// logKeyEpoch is the epoch of a log key relative to the ltx/ prefix, in the
// canonical forms only.
func logKeyEpoch(rest string) (uint64, bool) {
	if name, ok := strings.CutPrefix(rest, "announce/"); ok {
		e, err := strconv.ParseUint(name, 10, 64)
		return e, err == nil && e > 0 && fmt.Sprintf("%020d", e) == name
	}
	dir, name, ok := strings.Cut(strings.TrimPrefix(rest, "e"), "/")
	if !ok || !strings.HasPrefix(rest, "e") {
		return 0, false
	}
	e, err := strconv.ParseUint(dir, 10, 64)
	if err != nil || e == 0 || strconv.FormatUint(e, 10) != dir {
		return 0, false
	}
	hex, ok := strings.CutSuffix(name, ".ltx")
	if !ok {
		hex, ok = strings.CutSuffix(name, ".snapshot")
	}
	if !ok || len(hex) != 16 {
		return 0, false
	}
	t, err := strconv.ParseUint(hex, 16, 64)
	return e, err == nil && t > 0 && fmt.Sprintf("%016x", t) == hex
}
