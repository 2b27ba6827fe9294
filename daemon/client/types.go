package client

import (
	"github.com/deedkit/deed/errcode"
)

// The wire types of the daemon's HTTP API: the daemon encodes them, the
// Client decodes them. Field names and JSON keys are the API's contract.

// CellInfo is the answer of GET /v1/cells/{cell}: the cell's ownership
// record, and what the daemon knows about its owner.
type CellInfo struct {
	Cell       string `json:"cell"`
	Node       string `json:"node"`
	Epoch      uint64 `json:"epoch"`
	Released   bool   `json:"released"`
	Claimed    bool   `json:"claimed"`
	HeldHere   bool   `json:"held_here"`
	OwnerAlive bool   `json:"owner_alive"`
	OwnerAddr  string `json:"owner_addr,omitempty"`
}

// HeldCell is one cell the daemon holds, at its lease's epoch.
type HeldCell struct {
	Cell  string `json:"cell"`
	Epoch uint64 `json:"epoch"`
}

// HeldCells is the answer of GET /v1/cells: the cells the node holds, by
// name.
type HeldCells struct {
	Cells []HeldCell `json:"cells"`
	Node  string     `json:"node"`
}

// Claim is the answer of POST /v1/cells/{cell}/claim.
type Claim struct {
	Cell  string `json:"cell"`
	Node  string `json:"node"`
	Epoch uint64 `json:"epoch"`
}

// Released is the answer of POST /v1/cells/{cell}/release: the cell is
// released (no node) at the epoch it was held at.
type Released struct {
	Cell     string `json:"cell"`
	Epoch    uint64 `json:"epoch"`
	Node     string `json:"node"`
	Released bool   `json:"released"`
}

// Moved is the answer of POST /v1/cells/{cell}/move: the cell is held by
// To at Epoch (From is the node that handed it off, "" when the cell was
// held nowhere and To claimed it directly).
type Moved struct {
	Cell  string `json:"cell"`
	From  string `json:"from,omitempty"`
	To    string `json:"to"`
	Epoch uint64 `json:"epoch"`
	Moved bool   `json:"moved"`
}

// NodeState is the answer of POST and DELETE /v1/node/drain: whether the
// node drains, and how many cells it holds now.
type NodeState struct {
	Node     string `json:"node"`
	Draining bool   `json:"draining"`
	Cells    int    `json:"cells"`
}

// AppendResult is the answer of a durable append: where the record landed,
// and its timestamp (ms since the Unix epoch, assigned by the owner).
// Replayed is not part of the body: the client sets it from the
// Idempotent-Replayed header (the first answer to a key, replayed).
type AppendResult struct {
	Cell     string `json:"cell"`
	Epoch    uint64 `json:"epoch"`
	TxID     uint64 `json:"txid"`
	Pos      uint64 `json:"pos"`
	TS       int64  `json:"ts"`
	Replayed bool   `json:"-"`
}

// BatchRequest is the body of POST /v1/cells/{cell}/batch.
type BatchRequest struct {
	Records []BatchRecord `json:"records"`
}

// BatchRecord is one record of a batch.
type BatchRecord struct {
	Data []byte `json:"data"` // base64 in JSON
}

// BatchResult is the answer of a durable batch: one transaction, records
// at positions FirstPos..LastPos.
type BatchResult struct {
	Cell     string `json:"cell"`
	Epoch    uint64 `json:"epoch"`
	TxID     uint64 `json:"txid"`
	FirstPos uint64 `json:"first_pos"`
	LastPos  uint64 `json:"last_pos"`
	TS       int64  `json:"ts"`
	Replayed bool   `json:"-"`
}

// Record is one record in a read.
type Record struct {
	Pos   uint64 `json:"pos"`
	Epoch uint64 `json:"epoch"`
	TxID  uint64 `json:"txid"`
	TS    int64  `json:"ts"`
	Data  []byte `json:"data"` // base64 in JSON
}

// ReadResult is the answer of GET /v1/cells/{cell}/records. NextAfter is
// the position to read after next (the last record's, or the request's
// after when there were none).
type ReadResult struct {
	Cell      string   `json:"cell"`
	NextAfter uint64   `json:"next_after"`
	Records   []Record `json:"records"`
}

// Tail is GET /v1/cells/{cell}/tail: where the cell's log ends, answered
// by its holder after a barrier (linearizable). NextPos is the position
// the next record gets (every record below it is committed); TS the
// newest timestamp the holder wrote or fenced (0 if none).
type Tail struct {
	Cell    string `json:"cell"`
	NextPos uint64 `json:"next_pos"`
	Epoch   uint64 `json:"epoch"`
	Node    string `json:"node"`
	TS      int64  `json:"ts"`
}

// SnapshotResult is PUT /v1/cells/{cell}/snapshot's answer: the snapshot
// written (or found already written, the same) covering every record up
// to Pos, at transaction TxID, by Epoch.
type SnapshotResult struct {
	Cell  string `json:"cell"`
	Epoch uint64 `json:"epoch"`
	TxID  uint64 `json:"txid"`
	Pos   uint64 `json:"pos"`
}

// TrimResult is POST /v1/cells/{cell}/trim's answer: the trim point in
// effect (records below Before are no longer served), which may be higher
// than the one asked for, by the holder at Epoch.
type TrimResult struct {
	Cell   string `json:"cell"`
	Before uint64 `json:"before"`
	Epoch  uint64 `json:"epoch"`
}

// ErrorBody is every error the API returns.
type ErrorBody struct {
	Code  errcode.Code `json:"code"`
	Error string       `json:"error"`
	// Applied says whether the request may have taken effect: "no" (it
	// was refused or failed before anything was written: a retry cannot
	// duplicate it) or "unknown" (DEED-E012: it may have taken effect; read
	// before retrying). Every error body carries it; on a read it is "no".
	Applied   Applied `json:"applied"`
	Owner     string  `json:"owner,omitempty"`
	OwnerAddr string  `json:"owner_addr,omitempty"`
	// NextPos is, on a refused conditional append (DEED-E044), the log's
	// next position.
	NextPos *uint64 `json:"next_pos,omitempty"`
	// FirstPos is, on a read refused below the cell's trim point
	// (DEED-E046, 410), the first position still served.
	FirstPos *uint64 `json:"first_pos,omitempty"`
}

// Applied is the "applied" field of an error body: whether a request that
// failed may still have taken effect.
type Applied string

// The two answers of Applied.
const (
	AppliedNo      Applied = "no"
	AppliedUnknown Applied = "unknown"
)

// AppliedOf is the one place that says whether a failed request may have
// taken effect. It follows from the code alone: DEED-E012 is the only code
// of an outcome that may have landed, and every layer (the log, the API,
// the client) keeps it for exactly those, so every other code is a refusal
// or a failure before anything was written.
func AppliedOf(err error) Applied {
	if errcode.CodeOf(err) == errcode.CodeAmbiguous {
		return AppliedUnknown
	}
	return AppliedNo
}
