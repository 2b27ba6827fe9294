package replication

import (
	"log/slog"
	"testing"
	"unsafe"

	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

// Logs opened with one Shared option point to one configuration (a daemon
// holds one log per cell: a copy each cost 72 bytes), with what its
// options set; an option given after it applies to a private copy, and the
// shared configuration stays as it was.
func TestSharedOptions(t *testing.T) {
	if size := unsafe.Sizeof(store{}); size > 48 {
		t.Errorf("store is %d bytes, want at most 48 (its configuration is shared, not copied)", size)
	}
	m := fakes3.NewMem()
	n, err := owner.NewNode(m, owner.Config{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	commits := 0
	logger := slog.New(slog.DiscardHandler)
	shared := Shared(WithLogger(logger), WithCommitObserver(func(int, int) { commits++ }), WithMaxBatch(7, 0))
	var logs []*Log
	for _, cell := range []string{"a", "b"} {
		lease, err := n.Claim(t.Context(), cell, owner.ClaimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lg, err := Open(t.Context(), m, lease, shared)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lg.Close(t.Context()) })
		if _, err := lg.Append(t.Context(), lease, []byte("x")); err != nil {
			t.Fatal(err)
		}
		logs = append(logs, lg)
	}
	a, b := logs[0].s.cfg, logs[1].s.cfg
	if a != b {
		t.Fatal("two logs opened with one Shared option keep two configurations")
	}
	if a.logger != logger || a.maxBatchRecords != 7 || a.onCommit == nil || commits != 2 {
		t.Fatalf("shared configuration: logger %v, max batch %d, observer set %v, commits %d", a.logger == logger, a.maxBatchRecords, a.onCommit != nil, commits)
	}
	own := newStore(m, "c", []Option{shared, WithMaxBatch(3, 0)})
	if own.cfg == a || own.cfg.maxBatchRecords != 3 || own.cfg.logger != logger || a.maxBatchRecords != 7 {
		t.Fatalf("an option after Shared: own copy %v, max batch %d (shared: %d)", own.cfg != a, own.cfg.maxBatchRecords, a.maxBatchRecords)
	}
}
