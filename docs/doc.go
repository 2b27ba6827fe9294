// Package docs holds deed's reference pages (Markdown) and the tests that
// keep them honest: every relative link and anchor resolves, every Go code
// block builds against the module, and openapi.yaml matches the daemon.
// It has no code of its own.
package docs
