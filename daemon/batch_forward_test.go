package daemon

import (
	"testing"

	"github.com/deedkit/deed/fakes3"
)

// A batch through a node of the fleet that does not hold the cell is
// forwarded to the holder and its proved answer relayed, as an append is.
func TestBatchForwardedToHolder(t *testing.T) {
	m := fakes3.NewMem()
	a := startFleetNode(t, m.Client("a"), "a", testSecret, "", APIConfig{})
	b := startFleetNode(t, m.Client("b"), "b", testSecret, "", APIConfig{})
	hold(t, b, "c", "one")
	got := send(t, "POST", a.srv.URL+"/v1/cells/c/batch", `{"records":[{"data":"eA=="},{"data":"eQ=="}]}`, "Content-Type", "application/json")
	if got.status != 200 || got.body["last_pos"] != 3.0 || got.hdr.Get(HeaderNode) != "b" {
		t.Fatalf("batch through a: %+v", got)
	}
}
