package daemon

import (
	"io"
	"net/http"
	"strconv"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// The headers of a snapshot's answer.
const (
	// HeaderSnapshotPos is the last position a snapshot covers: a read
	// after it continues from the snapshot.
	HeaderSnapshotPos = "Deed-Snapshot-Pos"
	// HeaderSnapshotEpoch is the epoch that wrote the snapshot.
	HeaderSnapshotEpoch = "Deed-Snapshot-Epoch"
)

// putSnapshot is PUT /v1/cells/{cell}/snapshot?upto=P: the body (within
// the body limit, and a file's 16 MiB) is the application's state covering
// every record up to position P, written by the holder
// (replication.Log.SnapshotAt) and routed as an append is. Restores and
// GC start from the newest snapshot.
func (d *Daemon) putSnapshot(w http.ResponseWriter, r *http.Request) {
	state, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, errcode.Errorf(errcode.CodeBadRequest, "snapshot: read request body: %w", err))
		return
	}
	s := r.URL.Query().Get("upto")
	upTo, err := strconv.ParseUint(s, 10, 64)
	if err != nil || upTo == 0 {
		writeError(w, errcode.Errorf(errcode.CodeBadRequest, "?upto=%q: want the last position the snapshot covers (1 or more, committed)", s))
		return
	}
	var snap replication.Snapshot
	c, answered, err := d.onHolder(w, r, state, r.PathValue("cell"), func(c *holding) (err error) {
		snap, err = c.log.SnapshotAt(r.Context(), c.lease, replication.Pos(upTo), state)
		return err
	})
	if answered {
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	// A new snapshot may cover files below the trim point: delete them.
	if before, err := d.trimPoint(r.Context(), c.name, c, false); err == nil {
		d.scheduleTrimDelete(c.name, before)
	}
	writeJSONStatus(w, http.StatusOK, client.SnapshotResult{Cell: c.name, Epoch: snap.Epoch, TxID: uint64(snap.TxID), Pos: uint64(snap.NextPos) - 1})
}

// getSnapshot is GET /v1/cells/{cell}/snapshot: the newest snapshot's
// state, read from the bucket by whichever node is asked (it is immutable
// once written), its last position in Deed-Snapshot-Pos.
func (d *Daemon) getSnapshot(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("cell")
	if err := owner.ValidateName("cell", name); err != nil {
		writeError(w, err)
		return
	}
	snap, err := replication.LatestSnapshot(r.Context(), d.b, name)
	if err != nil {
		writeError(w, err)
		return
	}
	if snap == nil {
		writeError(w, errcode.Errorf(errcode.CodeNoSnapshot, "cell %s has no snapshot: read its records from position 0", name))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set(HeaderSnapshotPos, strconv.FormatUint(uint64(snap.NextPos)-1, 10))
	h.Set(HeaderSnapshotEpoch, strconv.FormatUint(snap.Epoch, 10))
	h.Set("Content-Length", strconv.Itoa(len(snap.State)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(snap.State)
}
