package owner_test

import (
	"context"
	"fmt"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

func ExampleNode_Claim() {
	ctx := context.Background()
	b := fakes3.NewMem() // or bucket.OpenS3(ctx, loc, opts)

	a, _ := owner.NewNode(b, owner.Config{Name: "node-a", Addr: "10.0.0.1:7480"})
	lease, err := a.Claim(ctx, "tenant-42", owner.ClaimOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(lease.Cell(), lease.Epoch())

	// node-a was never opened, so it has no node lease and counts as dead:
	// node-b's claim takes over and its new epoch fences node-a. (Had
	// node-a called Open, node-b would get DEED-E020 until it stopped.)
	b2, _ := owner.NewNode(b, owner.Config{Name: "node-b"})
	l2, _ := b2.Claim(ctx, "tenant-42", owner.ClaimOptions{})
	fmt.Println(l2.Node(), l2.Epoch())
	fmt.Println(lease.Release(ctx))
	// Output:
	// tenant-42 1
	// node-b 2
	// DEED-E021 lease lost: cell tenant-42 epoch 1 superseded: own.json changed since the claim
}

func ExampleLease_Release() {
	ctx := context.Background()
	b := fakes3.NewMem()
	n, _ := owner.NewNode(b, owner.Config{Name: "node-a"})
	lease, _ := n.Claim(ctx, "job-7", owner.ClaimOptions{})
	fmt.Println(lease.Release(ctx))
	fmt.Println(lease.Err())
	rec, _, _ := owner.Inspect(ctx, b, "job-7")
	fmt.Printf("node=%q epoch=%d released=%v\n", rec.Node, rec.Epoch, rec.Released())
	// Output:
	// <nil>
	// DEED-E022 lease released: cell job-7 epoch 1
	// node="" epoch=1 released=true
}

func ExampleNode_With() {
	ctx := context.Background()
	b := fakes3.NewMem()
	n, _ := owner.NewNode(b, owner.Config{Name: "node-a"})
	err := n.With(ctx, "report-2026-11", func(l *owner.Lease) error {
		fmt.Println("exclusive work as epoch", l.Epoch())
		return nil
	})
	fmt.Println(err)
	_, err = n.Claim(ctx, "bad/name", owner.ClaimOptions{})
	fmt.Println(bucket.CodeOf(err), bucket.CodeOf(err).ExitStatus())
	// Output:
	// exclusive work as epoch 1
	// <nil>
	// DEED-E001 2
}
