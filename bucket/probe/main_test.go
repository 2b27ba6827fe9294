package probe_test

import (
	"testing"

	"github.com/deedkit/deed/fakes3/s3test"
)

// versitygw, when DEED_VERSITYGW starts it, must be stopped when the test
// binary ends.
func TestMain(m *testing.M) { s3test.Main(m) }
