//go:build deedman

package main

import (
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// The man command exists only in builds with the deedman tag (make man), so
// release binaries carry neither it nor the markdown-to-roff converter.
func init() { commands = append(commands, newManCmd) }

func newManCmd(cfg *config) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "man",
		Short:  "Write man pages for every command into --dir",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true // no date: the pages are reproducible
			v, _ := buildVersion()
			hdr := &doc.GenManHeader{Title: "DEED", Section: "1", Source: "deed " + v, Manual: "deed manual"}
			return doc.GenManTree(root, hdr, dir)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "man", "directory to write the pages into")
	return cmd
}
