package replication_test

import (
	"context"
	"fmt"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// An owner claims a cell, opens its log (fencing every older epoch),
// appends, and hands over cleanly: Close seals the chain, then the lease
// is released. Any process can read the log.
func Example() {
	ctx := context.Background()
	b := fakes3.NewMem()
	node, _ := owner.NewNode(b, owner.Config{Name: "node-a"})
	lease, err := node.Claim(ctx, "orders", owner.ClaimOptions{})
	if err != nil {
		panic(err)
	}
	log, err := replication.Open(ctx, b, lease)
	if err != nil {
		panic(err)
	}
	for _, r := range []string{"created", "paid", "shipped"} {
		res, err := log.Append(ctx, lease, []byte(r))
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: epoch %d txid %d position %d\n", r, res.Epoch, res.TxID, res.Pos)
	}
	if err := log.Close(ctx); err != nil { // seals the chain's end
		panic(err)
	}
	if err := lease.Release(ctx); err != nil {
		panic(err)
	}

	recs, err := replication.Read(ctx, b, "orders", 1, 10)
	if err != nil {
		panic(err)
	}
	for _, r := range recs {
		fmt.Printf("read %d: %s\n", r.Pos, r.Data)
	}
	// Output:
	// created: epoch 1 txid 1 position 1
	// paid: epoch 1 txid 2 position 2
	// shipped: epoch 1 txid 3 position 3
	// read 2: paid
	// read 3: shipped
}

// A forced takeover fences the old owner at its next write: its append
// fails with DEED-E021 and its lease ends. What it was acknowledged for
// stays in the log.
func Example_takeover() {
	ctx := context.Background()
	b := fakes3.NewMem()
	a, _ := owner.NewNode(b, owner.Config{Name: "a"})
	la, _ := a.Claim(ctx, "orders", owner.ClaimOptions{})
	logA, _ := replication.Open(ctx, b, la)
	logA.Append(ctx, la, []byte("from a"))

	c, _ := owner.NewNode(b, owner.Config{Name: "c"})
	lc, _ := c.Claim(ctx, "orders", owner.ClaimOptions{Force: true})
	logC, _ := replication.Open(ctx, b, lc) // seals epoch 1's chain
	logC.Append(ctx, lc, []byte("from c"))

	_, err := logA.Append(ctx, la, []byte("stale"))
	fmt.Println(errcode.CodeOf(err), errcode.CodeOf(la.Err()))

	recs, _ := replication.Read(ctx, b, "orders", 0, 0)
	for _, r := range recs {
		fmt.Printf("%d %s (epoch %d)\n", r.Pos, r.Data, r.Epoch)
	}
	logA.Close(ctx)
	logC.Close(ctx)
	// Output:
	// DEED-E021 DEED-E021
	// 1 from a (epoch 1)
	// 2 from c (epoch 2)
}

// Snapshots bound restore: it reads the newest snapshot and the files
// after it. GC then deletes what the snapshot covers in sealed epochs.
func ExampleLog_Snapshot() {
	ctx := context.Background()
	b := fakes3.NewMem()
	n, _ := owner.NewNode(b, owner.Config{Name: "a"})
	lease, _ := n.Claim(ctx, "counter", owner.ClaimOptions{})
	log, _ := replication.Open(ctx, b, lease)
	var last replication.Result
	for i := 1; i <= 5; i++ {
		last, _ = log.Append(ctx, lease, []byte{byte(i)})
	}
	log.Snapshot(ctx, lease, last.TxID, []byte("sum=15"))
	log.Append(ctx, lease, []byte{6})
	log.Close(ctx)
	lease.Release(ctx)

	head, _ := replication.Restore(ctx, b, "counter",
		func(s replication.Snapshot) error {
			fmt.Printf("snapshot %s up to txid %d\n", s.State, s.TxID)
			return nil
		},
		func(r replication.Record) error { fmt.Printf("then record %d: %d\n", r.Pos, r.Data[0]); return nil })
	fmt.Println("next position", head.NextPos)

	// GC keeps the last minutes of record files by default, for the
	// idempotency keys a new owner reads; this log was written without
	// keys, so they may go.
	rep, _ := replication.GC(ctx, b, "counter", replication.GCOptions{DryRun: true, DropKeyWindow: true})
	fmt.Println("gc would delete", len(rep.Deleted), "files")
	// Output:
	// snapshot sum=15 up to txid 5
	// then record 6: 6
	// next position 7
	// gc would delete 5 files
}

// A node that has fenced (it could not renew its node lease, most likely
// because it cannot reach the store) lets go of its logs without sealing
// them: Abandon sends no request, and the next owner seals the chain end
// when it opens the log.
func ExampleLog_Abandon() {
	ctx := context.Background()
	b := fakes3.NewMem()
	a, _ := owner.NewNode(b, owner.Config{Name: "node-a"})
	lease, _ := a.Claim(ctx, "orders", owner.ClaimOptions{})
	log, _ := replication.Open(ctx, b, lease)
	if _, err := log.Append(ctx, lease, []byte("created")); err != nil {
		panic(err)
	}

	log.Abandon()
	_, err := log.Append(ctx, lease, []byte("paid"))
	fmt.Println("after Abandon:", errcode.CodeOf(err))

	// node-a never opened a node lease, so node-b may take the cell over.
	bn, _ := owner.NewNode(b, owner.Config{Name: "node-b"})
	next, _ := bn.Claim(ctx, "orders", owner.ClaimOptions{})
	log2, err := replication.Open(ctx, b, next) // seals epoch 1 at its end
	if err != nil {
		panic(err)
	}
	res, _ := log2.Append(ctx, next, []byte("paid"))
	fmt.Printf("node-b appended at epoch %d position %d\n", res.Epoch, res.Pos)
	// Output:
	// after Abandon: DEED-E040
	// node-b appended at epoch 2 position 2
}
