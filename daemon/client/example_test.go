package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"time"

	"github.com/deedkit/deed/daemon"
	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/fakes3"
)

// Every failure is a *client.Error with the DEED code and whether the
// request may have taken effect: "no" means a retry cannot duplicate it,
// "unknown" (DEED-E012 only) means read before sending it again.
func ExampleClient() {
	ctx := context.Background()
	d, err := daemon.Open(ctx, daemon.Config{Node: "node-a", TTL: 10 * time.Second}, fakes3.NewMem(), slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close(ctx)
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()

	c, err := client.New(srv.URL, client.Options{Token: ""})
	if err != nil {
		fmt.Println(err)
		return
	}
	claim, _ := c.Claim(ctx, "jobs", false)
	fmt.Println("claimed", claim.Cell, "at epoch", claim.Epoch, "by", claim.Node)
	held, _ := c.Cells(ctx)
	fmt.Println("held:", held.Cells)

	// A record must have at least one byte.
	_, err = c.Append(ctx, "jobs", nil)
	var ce *client.Error
	if errors.As(err, &ce) {
		fmt.Println(ce.Code, ce.Status, "applied:", ce.Applied)
	}
	// A linearizable read of a cell this daemon does not hold.
	_, err = c.Read(ctx, "elsewhere", client.ReadOptions{Barrier: true})
	if errors.As(err, &ce) {
		fmt.Println(ce.Code, ce.Status, "applied:", ce.Applied)
	}
	rel, _ := c.Release(ctx, "jobs")
	fmt.Println("released:", rel.Released)
	// Output:
	// claimed jobs at epoch 1 by node-a
	// held: [{jobs 1}]
	// DEED-E040 400 applied: no
	// DEED-E024 409 applied: no
	// released: true
}
