package daemon

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
)

// client.Follow yields every record once, in order, those already there
// and those appended later, across the cell's release and its takeover by
// another node; a cell name the daemon refuses ends it with that error.
func TestClientFollowAcrossMoves(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	b := startTestDaemon(t, m.Client("b"), "b", APIConfig{})
	c, err := client.New(a.srv.URL, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	appendOn := func(td *testDaemon, i int) {
		t.Helper()
		if st, res := td.call(t, "POST", "/v1/cells/c/append", fmt.Sprint(i)); st != 200 || res["pos"] != float64(i) {
			t.Fatalf("append %d: %d %v", i, st, res)
		}
	}
	appendOn(a, 1)
	appendOn(a, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got := make(chan client.Record, 16)
	done := make(chan error, 1)
	go func() {
		defer close(done)
		for rec, err := range c.Follow(ctx, "c", 0) {
			if err != nil {
				done <- err
				return
			}
			got <- rec
		}
	}()
	want := 1
	next := func(n int) {
		t.Helper()
		for ; want <= n; want++ {
			select {
			case rec := <-got:
				if rec.Pos != uint64(want) || string(rec.Data) != fmt.Sprint(want) {
					t.Fatalf("followed %d %q, want %d", rec.Pos, rec.Data, want)
				}
			case err := <-done:
				t.Fatalf("Follow ended at %d: %v", want, err)
			case <-ctx.Done():
				t.Fatalf("record %d never came", want)
			}
		}
	}
	next(2)
	appendOn(a, 3)
	next(3)
	if st, res := a.call(t, "POST", "/v1/cells/c/release", ""); st != 200 {
		t.Fatalf("release: %d %v", st, res)
	}
	appendOn(b, 4) // b takes the cell over; a now reads the bucket
	appendOn(b, 5)
	next(5)
	select {
	case rec := <-got:
		t.Fatalf("an extra record %d", rec.Pos)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Follow ended by its context with %v, want no error", err)
	}

	n := 0
	for rec, err := range c.Follow(t.Context(), "bad!name", 0) {
		if n++; errcode.CodeOf(err) != errcode.CodeInvalidName {
			t.Fatalf("Follow of a bad name: %v %v", rec, err)
		}
	}
	if n != 1 {
		t.Fatalf("Follow of a bad name yielded %d times, want its error once", n)
	}
}
