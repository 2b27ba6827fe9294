package s3_test

import (
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/s3"
)

// The S3 adapter opens s3:// locations only: a gs:// or az:// URL belongs
// to another adapter.
func TestOpenRefusesOtherSchemes(t *testing.T) {
	if _, err := s3.Open(t.Context(), bucket.Location{Scheme: "gs", Bucket: "b"}, s3.Options{}); err == nil {
		t.Errorf("Open accepted a gs:// location")
	}
}
