package daemon_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
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

// Two daemons of one fleet on one bucket: a request sent to the node that
// does not hold the cell is forwarded to the one that does (the fleet secret
// authenticates the hop), and every answer names the node that served it.
func Example_fleet() {
	ctx := context.Background()
	b := fakes3.NewMem()
	open := func(node string) (*daemon.Daemon, *httptest.Server) {
		// A node advertises its own address in its node lease, so its
		// server listens before the daemon opens.
		var h atomic.Pointer[http.Handler]
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*h.Load()).ServeHTTP(w, r) }))
		d, err := daemon.Open(ctx, daemon.Config{Node: node, Advertise: srv.URL, TTL: 10 * time.Second,
			FleetSecret: "example-fleet-secret", MoveRate: -1 /* no rebalancing, for a fixed output */}, b, slog.New(slog.DiscardHandler))
		if err != nil {
			panic(err)
		}
		dh := d.Handler()
		h.Store(&dh)
		return d, srv
	}
	a, srvA := open("node-a")
	defer srvA.Close()
	defer a.Close(ctx)
	bb, srvB := open("node-b")
	defer srvB.Close()
	defer bb.Close(ctx)

	ca, _ := client.New(srvA.URL, client.Options{})
	if _, err := ca.Claim(ctx, "orders", false); err != nil {
		fmt.Println(err)
		return
	}
	resp, err := http.Post(srvB.URL+"/v1/cells/orders/append", "application/octet-stream", strings.NewReader("hello"))
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status, "served by", resp.Header.Get(daemon.HeaderNode), "through", resp.Header.Get("Deed-Forwarded-By"))

	cb, _ := client.New(srvB.URL, client.Options{})
	page, err := cb.Read(ctx, "orders", client.ReadOptions{Barrier: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range page.Records {
		fmt.Printf("%d %s\n", r.Pos, r.Data)
	}
	// Output:
	// 200 OK served by node-a through node-b
	// 1 hello
}
