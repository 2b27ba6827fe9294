package bucket_test

import (
	"testing"

	"github.com/deedkit/deed/bucket"
)

// Bucket URLs name the store by scheme: s3:// (the zero Scheme), gs://
// and az://; String gives the URL back.
func TestParseURLSchemes(t *testing.T) {
	ok := []struct {
		raw  string
		want bucket.Location
	}{
		{"s3://b", bucket.Location{Bucket: "b"}},
		{"s3://b/p/q/", bucket.Location{Bucket: "b", Prefix: "p/q"}},
		{"gs://b/p", bucket.Location{Scheme: "gs", Bucket: "b", Prefix: "p"}},
		{"az://container", bucket.Location{Scheme: "az", Bucket: "container"}},
	}
	for _, c := range ok {
		got, err := bucket.ParseURL(c.raw)
		if err != nil || got != c.want {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", c.raw, got, err, c.want)
		}
		if back := got.String(); back != c.want.String() || (c.raw != "s3://b/p/q/" && back != c.raw) {
			t.Errorf("%+v.String() = %q", got, back)
		}
	}
	for _, raw := range []string{"gcs://b", "azure://c", "http://b", "gs:///p", "az://c/../x", "s3://b?x=1"} {
		if _, err := bucket.ParseURL(raw); err == nil {
			t.Errorf("ParseURL(%q) accepted", raw)
		}
	}
}
