package daemon

import (
	"testing"
	"unsafe"

	"github.com/deedkit/deed/fakes3"
)

// A held cell keeps a compact copy of its name, shared by its lease, not
// the request path its name was cut from.
func TestCellKeepsOwnName(t *testing.T) {
	d := benchDaemon(t, fakes3.NewMem())
	defer closeDaemon(t, d)
	path := "/v1/cells/shared-name/append"
	name := path[len("/v1/cells/") : len(path)-len("/append")]
	h, err := d.acquire(t.Context(), name, false)
	if err != nil {
		t.Fatal(err)
	}
	if h.name != name {
		t.Fatalf("cell %q, want %q", h.name, name)
	}
	if unsafe.StringData(h.name) == unsafe.StringData(name) {
		t.Fatal("the cell keeps the request's path alive through its name")
	}
	if unsafe.StringData(h.lease.Cell()) != unsafe.StringData(h.name) {
		t.Fatal("the lease keeps a second copy of the cell's name")
	}
}
