//go:build deedman

package main

import (
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"
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
			escapeTree(root)
			v, _ := buildVersion()
			hdr := &doc.GenManHeader{Title: "DEED", Section: "1", Source: "deed " + v, Manual: "deed manual"}
			return doc.GenManTree(root, hdr, dir)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "man", "directory to write the pages into")
	return cmd
}

// escapeTree escapes, in every command's texts and flag usages, the
// characters the pages' Markdown-to-roff converter would take for HTML:
// unescaped, a placeholder such as <host>-exec-<random> or e<EPOCH> is
// dropped from the page as an unknown tag. This process only writes pages,
// so the tree is changed in place. A flag shared by several commands (the
// root's persistent flags) is escaped once.
func escapeTree(root *cobra.Command) {
	seen := map[*pflag.Flag]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Short = escapeMarkdown(c.Short)
		c.Long = escapeMarkdown(c.Long)
		for _, fs := range []*pflag.FlagSet{c.LocalFlags(), c.InheritedFlags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if !seen[f] {
					seen[f] = true
					f.Usage = escapeMarkdown(f.Usage)
				}
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// escapeMarkdown backslash-escapes < and > in Markdown prose, leaving code
// alone (a fenced or indented block, a `code span`), where the converter
// prints them as they are and a backslash would show.
func escapeMarkdown(s string) string {
	lines := strings.Split(s, "\n")
	fenced, indented := false, false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		// An indented line is code after a blank line or more code; after
		// prose it continues the paragraph.
		deep := strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "\t")
		indented = deep && (indented || i == 0 || strings.TrimSpace(lines[i-1]) == "")
		if fenced || indented {
			continue
		}
		var b strings.Builder
		code := false
		for _, r := range l {
			switch {
			case r == '`':
				code = !code
			case !code && (r == '<' || r == '>'):
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		lines[i] = b.String()
	}
	return strings.Join(lines, "\n")
}
