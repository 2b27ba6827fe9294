package s3_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/s3"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3/s3test"
)

// Missing credentials are DEED-E041 and say so, on reads and on
// conditional writes alike (a request that could not be signed was never
// sent, so a write is definitely not applied, not ambiguous). The SDK
// reports them without a type, sometimes with the 403 of an
// instance-metadata probe, sometimes with no status at all.
func TestMissingCredentialsAreUnauthorized(t *testing.T) {
	tg := s3test.HTTPFake(t)
	opts := tg.Options()
	opts.Credentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{}, errors.New("no EC2 IMDS role found")
	})
	b, err := s3.Open(t.Context(), tg.Loc, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, gerr := b.Get(t.Context(), "k", 0)
	_, perr := b.Put(t.Context(), "k", []byte("x"), bucket.IfAbsent)
	for _, err := range []error{gerr, perr} {
		if !errors.Is(err, bucket.ErrAccessDenied) || errcode.CodeOf(err) != errcode.CodeUnauthorized ||
			!strings.Contains(err.Error(), "no usable AWS credentials") {
			t.Errorf("got %v (code %s), want access denied, DEED-E041, naming credentials", err, errcode.CodeOf(err))
		}
	}
	if _, err := tg.Bucket.Head(t.Context(), "k"); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("the unsigned put reached the store: head = %v", err)
	}
}
