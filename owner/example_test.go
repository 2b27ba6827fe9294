package owner_test

import (
	"context"
	"fmt"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
	"github.com/deedkit/deed/owner"
)

func ExampleNode_Claim() {
	ctx := context.Background()
	b := fakes3.NewMem() // or s3.Open(ctx, loc, opts), package bucket/s3

	// node-a opens its node lease: while it renews it, node-a is alive to
	// its peers, and it re-reads the record of each cell it holds every
	// TTL/3, so that a lease taken from it ends by itself.
	a, _ := owner.NewNode(b, owner.Config{Name: "node-a", Addr: "10.0.0.1:7480", TTL: owner.MinTTL})
	if err := a.Open(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close(ctx)
	lease, err := a.Claim(ctx, "tenant-42", owner.ClaimOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(lease.Cell(), lease.Epoch())

	// node-b is refused while node-a is alive; an operator's forced claim
	// takes the cell, and its new epoch fences node-a.
	b2, _ := owner.NewNode(b, owner.Config{Name: "node-b"})
	_, err = b2.Claim(ctx, "tenant-42", owner.ClaimOptions{})
	fmt.Println(errcode.CodeOf(err))
	l2, _ := b2.Claim(ctx, "tenant-42", owner.ClaimOptions{Force: true})
	fmt.Println(l2.Node(), l2.Epoch())

	// node-a writes nothing, yet its lease ends within TTL/3.
	<-lease.Done()
	fmt.Println(lease.Err())
	// Output:
	// tenant-42 1
	// DEED-E020
	// node-b 2
	// DEED-E021 lease lost: cell tenant-42 epoch 1 superseded: now held by node node-b at epoch 2
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
	fmt.Println(errcode.CodeOf(err))
	// Output:
	// exclusive work as epoch 1
	// <nil>
	// DEED-E001
}
