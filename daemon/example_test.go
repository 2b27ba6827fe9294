package daemon_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"time"

	"github.com/deedkit/deed/daemon"
	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/fakes3"
)

// A node daemon in process: open it on a bucket (here an in-memory one;
// a real store is probed with probe.Run first), serve its API, and talk
// to it with the Go client.
func Example() {
	ctx := context.Background()
	b := fakes3.NewMem()

	d, err := daemon.Open(ctx, daemon.Config{Node: "node-a", Advertise: "http://node-a:7480", TTL: 10 * time.Second},
		b, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close(ctx) // drains: seals and releases every cell, then the node lease
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()

	c, _ := client.New(srv.URL, client.Options{})
	for _, rec := range []string{"hello", "world"} {
		res, err := c.Append(ctx, "orders", []byte(rec))
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("appended at %d (epoch %d)\n", res.Pos, res.Epoch)
	}
	page, err := c.Read(ctx, "orders", client.ReadOptions{Barrier: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range page.Records {
		fmt.Printf("%d %s\n", r.Pos, r.Data)
	}
	// Output:
	// appended at 1 (epoch 1)
	// appended at 2 (epoch 1)
	// 1 hello
	// 2 world
}
