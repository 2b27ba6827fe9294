package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// placeholder is a <word> in a command's help: <host>, e<EPOCH>, <listen>.
var placeholder = regexp.MustCompile(`<[A-Za-z][^<>\s]*>`)

// TestManPagesKeepPlaceholders runs `make man`'s command, offline
// (GOPROXY=off: the module cache must be enough), and checks that every
// <placeholder> of a command's texts and flags is on its page: the pages'
// Markdown converter drops what it takes for an HTML tag unless escaped.
func TestManPagesKeepPlaceholders(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the deedman binary")
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "run", "-tags", "deedman", ".", "man", "--dir", dir)
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run -tags deedman . man (offline): %v\n%s", err, out)
	}
	n := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		texts := []string{c.Short, c.Long}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) { texts = append(texts, f.Usage) })
		page := filepath.Join(dir, strings.ReplaceAll(c.CommandPath(), " ", "-")+".1")
		raw, err := os.ReadFile(page)
		if err != nil {
			if c.Hidden {
				return
			}
			t.Errorf("no page for %s: %v", c.CommandPath(), err)
			return
		}
		body := string(raw)
		for _, p := range placeholder.FindAllString(strings.Join(texts, "\n"), -1) {
			n++
			if !strings.Contains(body, p) {
				t.Errorf("%s: %s lacks %s", c.CommandPath(), filepath.Base(page), p)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(&config{inv: invocation{Getenv: func(string) string { return "" }}}))
	if n < 5 {
		t.Fatalf("found %d placeholders in the help texts: the scan is broken", n)
	}
	t.Logf("%d placeholders, all on their pages", n)
}
