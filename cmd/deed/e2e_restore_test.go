package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/daemon"
	"github.com/deedkit/deed/errcode"
)

// restoreRecords is how many records (one transaction file each) the log
// of TestE2ERestoreAfterTrimReadsBoundedObjects holds.
const restoreRecords = 200

// byMethod counts a cellCounter's requests by their kind (GET, HEAD, PUT,
// DELETE, LIST).
func byMethod(ops []string) map[string]int {
	n := map[string]int{}
	for _, op := range ops {
		m, _, _ := strings.Cut(op, " ")
		n[m]++
	}
	return n
}

// TestE2ERestoreAfterTrimReadsBoundedObjects proves on the real binary
// that a snapshot and a trim bound what a new owner reads: once the
// holder's background deletion has removed the record files the snapshot
// covers, a read from 0 through another node (refused below the trim
// point, then the snapshot, then the records after it) sends a handful
// of store requests on the cell's keys, however many records the log
// held. The control is the same log with neither: the read from 0 reads
// every one of the N transaction files, which is what an application
// rebuilding its state on a new owner pays without a snapshot. The new
// owner's first append is bounded in both (the claim of a released cell
// opens the log at its seal and replays nothing), and the test holds it
// to that too. The counts are taken at a proxy in front of the store (no
// added latency), on cells/<cell>/ keys only.
//
// The daemons run with --idempotency-keys 1: the idempotency window
// (10 minutes by default) keeps every record file younger than it from
// deletion, so that with the default a trim right after the appends would
// delete nothing; with one key recognised, only the tail's file is kept.
func TestE2ERestoreAfterTrimReadsBoundedObjects(t *testing.T) {
	c := newE2ECluster(t)
	cc := &cellCounter{}
	env := storeProxy(t, c, cc.note)
	start := func(node string) (*proc, string) {
		p := startDeed(t, env, "run", "--node", node, "--listen", anyPort, "--ttl", "2s",
			"--idempotency-keys", "1", "--trim-delete-rate", "10000")
		return p, waitNode(t, p, node)
	}
	pa, a := start("node-a")
	_, b := start("node-b")

	mustPost := func(url, body string) string {
		t.Helper()
		st, out := post(t, url, body)
		if st != 200 {
			t.Fatalf("POST %s: %d %s", url, st, out)
		}
		return out
	}
	// writeLog appends the records one at a time on node-a, each its own
	// transaction file.
	writeLog := func(cell string) {
		t.Helper()
		for i := 1; i <= restoreRecords; i++ {
			mustPost(a+"/v1/cells/"+cell+"/append", fmt.Sprintf("rec-%03d", i))
		}
	}
	// release releases the cell on node-a, sealing its epoch.
	release := func(cell string) {
		t.Helper()
		mustPost(a+"/v1/cells/"+cell+"/release", "")
	}
	readAll := func(base, cell string, after int) []string {
		t.Helper()
		var data []string
		for {
			st, out := get(t, fmt.Sprintf("%s/v1/cells/%s/records?after=%d&limit=1000", base, cell, after))
			if st != 200 {
				t.Fatalf("read %s after %d: %d %s", cell, after, st, out)
			}
			var page struct {
				Records []struct {
					Pos  int    `json:"pos"`
					Data []byte `json:"data"`
				} `json:"records"`
			}
			if err := json.Unmarshal([]byte(out), &page); err != nil {
				t.Fatalf("read %s: %v: %s", cell, err, out)
			}
			if len(page.Records) == 0 {
				return data
			}
			for _, r := range page.Records {
				data = append(data, string(r.Data))
				after = r.Pos
			}
		}
	}

	// With a snapshot and a trim.
	const trimmed = "trimmed"
	writeLog(trimmed)
	n := strconv.Itoa(restoreRecords)
	req, err := http.NewRequest(http.MethodPut, a+"/v1/cells/"+trimmed+"/snapshot?upto="+n, strings.NewReader("state up to "+n))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("snapshot: %d", resp.StatusCode)
	}
	release(trimmed)
	// The trim claims the cell again on node-a, so the epoch that wrote
	// the records is sealed and its files may go; the deletion runs in the
	// background and logs how many files it deleted when it is done.
	mustPost(a+"/v1/cells/"+trimmed+"/trim?before="+strconv.Itoa(restoreRecords+1), "")
	done := regexp.MustCompile(`msg="trim: deleted below the trim point" cell=` + trimmed + ` before=\d+ files=(\d+)`)
	deleted, _ := strconv.Atoi(reported(t, pa, done, 30*time.Second))
	if got := metricValue(t, a, "deed_trim_deleted_total"); got != int64(deleted) {
		t.Fatalf("deed_trim_deleted_total %d, the log says %d files", got, deleted)
	}
	release(trimmed)

	cc.arm(trimmed)
	st, out := get(t, b+"/v1/cells/"+trimmed+"/records?after=0")
	var refusal struct {
		Code     string `json:"code"`
		FirstPos int    `json:"first_pos"`
	}
	_ = json.Unmarshal([]byte(out), &refusal)
	if st != http.StatusGone || refusal.Code != string(errcode.CodeTrimmed) || refusal.FirstPos != restoreRecords+1 {
		t.Fatalf("read from 0 below the trim point: %d %.300s, want 410 %s with first_pos %d", st, out, errcode.CodeTrimmed, restoreRecords+1)
	}
	resp, err = http.Get(b + "/v1/cells/" + trimmed + "/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get(daemon.HeaderSnapshotPos) != n {
		t.Fatalf("snapshot: %d at %q, want 200 at %s", resp.StatusCode, resp.Header.Get(daemon.HeaderSnapshotPos), n)
	}
	if got := readAll(b, trimmed, restoreRecords); len(got) != 0 {
		t.Fatalf("records after the snapshot: %q, want none", got)
	}
	trimmedRead := cc.take()
	cc.arm(trimmed)
	mustPost(b+"/v1/cells/"+trimmed+"/append", "after the restore")
	trimmedAppend := cc.take()

	// The control: the same log, neither snapshot nor trim.
	const untrimmed = "untrimmed"
	writeLog(untrimmed)
	release(untrimmed)
	cc.arm(untrimmed)
	if got := readAll(b, untrimmed, 0); len(got) != restoreRecords || got[0] != "rec-001" || got[len(got)-1] != fmt.Sprintf("rec-%03d", restoreRecords) {
		t.Fatalf("read from 0: %d records, want %d", len(got), restoreRecords)
	}
	controlRead := cc.take()
	cc.arm(untrimmed)
	mustPost(b+"/v1/cells/"+untrimmed+"/append", "after the restore")
	controlAppend := cc.take()

	t.Logf("%d records; trim deleted %d files", restoreRecords, deleted)
	for _, r := range []struct {
		name string
		ops  []string
	}{
		{"snapshot+trim: read from 0", trimmedRead},
		{"snapshot+trim: first append", trimmedAppend},
		{"control: read from 0", controlRead},
		{"control: first append", controlAppend},
	} {
		t.Logf("%-28s %4d requests %v", r.name, len(r.ops), byMethod(r.ops))
		if len(r.ops) <= 30 {
			t.Logf("  %s", strings.Join(r.ops, ", "))
		}
	}
	if deleted < restoreRecords-1 {
		t.Errorf("the trim deleted %d record files, want at least %d (all but the tail's)", deleted, restoreRecords-1)
	}
	// After snapshot+trim, 9 requests measured for the read: the trim
	// point (GET trim.json), the snapshot (LIST, GET), and the records
	// after it (LIST, then the two epochs' seals and the one record file
	// the idempotency window kept, the file holding the snapshot's last
	// position). The first append, 5: the claim (a create-first guess
	// refused, GET and conditional PUT of own.json) and the log's open
	// (GET the seal, PUT the new epoch's). None of it depends on N.
	if got := len(trimmedRead); got > 12 {
		t.Errorf("after snapshot+trim, the read from 0 sent %d requests, want at most 12", got)
	}
	// The daemon's claim of a released cell opens the log at its seal and
	// replays nothing, with or without a snapshot (4 or 5 requests).
	for _, ops := range [][]string{trimmedAppend, controlAppend} {
		if got := len(ops); got > 8 {
			t.Errorf("the new owner's first append sent %d requests, want at most 8: %s", got, strings.Join(ops, ", "))
		}
	}
	// Without them the read from 0 reads every record file (and the
	// files read ahead past the end).
	if got := byMethod(controlRead)["GET"]; got < restoreRecords {
		t.Errorf("control: the read from 0 sent %d GETs, want at least one per record file (%d)", got, restoreRecords)
	}
}
