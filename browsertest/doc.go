// Package browsertest drives the status page of real `deed run` daemons in
// headless Chromium (`make test-browser`). It is a Go module of its own, so
// that the browser driver never becomes a dependency of deed itself; it
// talks to deed only through the built binary and HTTP.
package browsertest
