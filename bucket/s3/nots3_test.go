package s3_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/bucket"
	"github.com/deedkit/deed/bucket/storetest"
	"github.com/deedkit/deed/errcode"
)

// An endpoint that is not an S3 store (the usual mistake: --endpoint at a
// deed daemon's API port) must not be read as "no such key": every
// operation fails with ErrNotS3 (DEED-E040), naming what answered. A
// proxy's error page at a 5xx stays what Classify makes of it: a
// conditional write may have reached the store behind it.
func TestNotS3Endpoint(t *testing.T) {
	isolateAWSConfig(t)
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    [8]error // storetest.ClassOps order
		mention string
	}{
		{
			name:    "plain-text 404 (Go's NotFound)",
			handler: http.NotFound,
			want:    [8]error{bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3},
			mention: "404 page not found",
		},
		{
			name: "deed daemon JSON 404",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(404)
				_, _ = w.Write([]byte(`{"code":"DEED-E040","error":"DEED-E040 no such endpoint"}`))
			},
			want:    [8]error{bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3},
			mention: "deed daemon",
		},
		{
			name: "HTML 405",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(405)
				_, _ = w.Write([]byte("<!DOCTYPE html><html><body>Method Not Allowed</body></html>"))
			},
			want:    [8]error{bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3, bucket.ErrNotS3},
			mention: "text/html",
		},
		{
			name: "HTML 200 to a listing",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				_, _ = w.Write([]byte("<!DOCTYPE html><html><body>welcome</body></html>"))
			},
			// Only the listing cannot be parsed; a GET or PUT that
			// "succeeds" against a web server is caught by the callers'
			// own checks of what they read (a corrupt record).
			want:    [8]error{nil, nil, bucket.ErrNotS3, nil, nil, nil, nil, nil},
			mention: "text/html",
		},
		{
			name: "proxy's HTML 502",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(502)
				_, _ = w.Write([]byte("<html><body>502 Bad Gateway</body></html>"))
			},
			want: [8]error{bucket.ErrUnavailable, bucket.ErrUnavailable, bucket.ErrUnavailable, bucket.ErrUnavailable,
				bucket.ErrAmbiguous, bucket.ErrAmbiguous, bucket.ErrUnavailable, bucket.ErrAmbiguous},
		},
		{
			name: "S3 XML 404 without request id",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodHead {
					w.WriteHeader(404) // S3 sends no body (and here no headers) on HEAD
					return
				}
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(404)
				_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>x</Message></Error>`))
			},
			want: [8]error{bucket.ErrNotFound, bucket.ErrNotFound, bucket.ErrNotFound, bucket.ErrNotFound,
				bucket.ErrNotFound, bucket.ErrPrecondition, nil, bucket.ErrNotFound},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			b := openCanned(t, srv.URL, 2*time.Second)
			for i, col := range storetest.ClassOps {
				if tc.want[i] == bucket.ErrUnavailable {
					continue // the SDK retries reads with backoff; TestClassifyThroughSDK covers 5xx
				}
				err := call(t.Context(), b, col)
				if tc.want[i] == nil {
					if err != nil && tc.name != "HTML 200 to a listing" {
						t.Errorf("%s: %v, want success", col.Name, err)
					}
					continue
				}
				if !errors.Is(err, tc.want[i]) {
					t.Errorf("%s: %v, want %v", col.Name, err, tc.want[i])
					continue
				}
				if tc.want[i] == bucket.ErrNotS3 {
					if errcode.CodeOf(err) != errcode.CodeBadRequest {
						t.Errorf("%s: code %s, want %s", col.Name, errcode.CodeOf(err), errcode.CodeBadRequest)
					}
					if !strings.Contains(err.Error(), srv.URL) || (col.Name != "head" && !strings.Contains(err.Error(), tc.mention)) {
						t.Errorf("%s: %v does not name what answered (%s, %q)", col.Name, err, srv.URL, tc.mention)
					}
				}
			}
		})
	}
}
