package s3test_test

import (
	"os"
	"testing"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/s3"
	"github.com/deedkit/deed/fakes3/s3test"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// Every call gets an empty bucket of its own, on every target.
func TestTargetsAreFreshAndWork(t *testing.T) {
	first := s3test.Targets(t)
	second := s3test.Targets(t)
	if len(first) == 0 || first[0].Name != "httpfake" {
		t.Fatalf("targets %+v, want the HTTP fake first", first)
	}
	want := 1
	if os.Getenv(s3test.EnvVersitygw) != "" {
		want = 2
	}
	if len(first) != want || len(second) != want {
		t.Fatalf("%d and %d targets, want %d", len(first), len(second), want)
	}
	for i := range first {
		a, b := first[i], second[i]
		if a.Endpoint == "" || a.Loc.Bucket == "" {
			t.Fatalf("%s: incomplete target %+v", a.Name, a)
		}
		if _, err := a.Bucket.Put(t.Context(), "k", []byte("a"), bucket.IfAbsent); err != nil {
			t.Fatalf("%s: %v", a.Name, err)
		}
		page, err := b.Bucket.List(t.Context(), bucket.ListInput{})
		if err != nil || len(page.Objects) != 0 {
			t.Fatalf("%s: second target sees %+v, %v; want a fresh bucket", b.Name, page, err)
		}
		// Options opens a second client on the same bucket.
		c, err := s3.Open(t.Context(), a.Loc, a.Options())
		if err != nil {
			t.Fatal(err)
		}
		if o, err := c.Get(t.Context(), "k", 0); err != nil || string(o.Body) != "a" {
			t.Fatalf("%s: second client: %q, %v", a.Name, o.Body, err)
		}
	}
}
