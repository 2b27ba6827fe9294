package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// pages returns README.md and every Markdown page under docs/, relative to
// the repository root.
func pages(t *testing.T) []string {
	t.Helper()
	out := []string{"README.md"}
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			out = append(out, filepath.Join("docs", p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readPage reads a page named relative to the repository root.
func readPage(t *testing.T, page string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", page))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
)

// prose returns the lines of a Markdown page outside fenced code blocks,
// with inline code spans blanked (a link inside backticks is text).
func prose(src string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(src, "\n") {
		if fence.MatchString(l) {
			in = !in
			out = append(out, "")
			continue
		}
		if in {
			out = append(out, "")
			continue
		}
		out = append(out, l)
	}
	return out
}

// slug is GitHub's anchor for a heading: the text lowercased, inline
// markup dropped, every character that is not a letter, digit, space,
// hyphen or underscore removed, and spaces turned into hyphens.
func slug(text string) string {
	text = strings.NewReplacer("`", "", "*", "").Replace(text)
	// A link in a heading keeps its text.
	text = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(text, "$1")
	text = regexp.MustCompile(`<[^>]+>`).ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors returns every anchor a page defines: its headings' slugs, with
// GitHub's -1, -2 suffixes for repeats, and explicit <a id> / <a name>.
func anchors(src string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(src) {
		if m := heading.FindStringSubmatch(l); m != nil {
			s := slug(m[1])
			if n := seen[s]; n > 0 {
				out[s+"-"+strconv.Itoa(n)] = true
			} else {
				out[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// links returns the targets of a page's inline links, images and
// reference definitions, with their line numbers.
func links(src string) (targets []string, lines []int) {
	for i, l := range prose(src) {
		l = codeSpan.ReplaceAllString(l, "")
		for _, m := range inlineLink.FindAllStringSubmatch(l, -1) {
			targets, lines = append(targets, m[1]), append(lines, i+1)
		}
		if m := refDef.FindStringSubmatch(l); m != nil {
			targets, lines = append(targets, m[1]), append(lines, i+1)
		}
	}
	return targets, lines
}

// checkLinks reports every relative link of page that names a missing
// file, or an anchor its target page lacks.
func checkLinks(t *testing.T, page, src string, read func(string) (string, error)) []string {
	var bad []string
	targets, lines := links(src)
	for i, target := range targets {
		if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		file, frag, _ := strings.Cut(target, "#")
		dest := page
		if file != "" {
			dest = filepath.Clean(filepath.Join(filepath.Dir(page), file))
		}
		if strings.HasPrefix(dest, "..") {
			bad = append(bad, page+":"+strconv.Itoa(lines[i])+": "+target+" leaves the repository")
			continue
		}
		body, err := read(dest)
		if err != nil {
			bad = append(bad, page+":"+strconv.Itoa(lines[i])+": "+target+": no such file "+dest)
			continue
		}
		if frag == "" {
			continue
		}
		if !strings.HasSuffix(dest, ".md") {
			bad = append(bad, page+":"+strconv.Itoa(lines[i])+": "+target+": an anchor into a file that is not Markdown")
			continue
		}
		if !anchors(body)[frag] {
			bad = append(bad, page+":"+strconv.Itoa(lines[i])+": "+target+": "+dest+" has no heading #"+frag)
		}
	}
	return bad
}

// readRepo reads a file or lists a directory named relative to the
// repository root (a link to a directory is fine).
func readRepo(p string) (string, error) {
	full := filepath.Join("..", p)
	fi, err := os.Stat(full)
	if err != nil {
		return "", err
	}
	if fi.IsDir() {
		return "", nil
	}
	b, err := os.ReadFile(full)
	return string(b), err
}

// TestLinksResolve checks every relative link and #anchor in README.md and
// docs/*.md against the files in the repository and their headings.
func TestLinksResolve(t *testing.T) {
	n := 0
	for _, page := range pages(t) {
		src := readPage(t, page)
		ts, _ := links(src)
		n += len(ts)
		for _, b := range checkLinks(t, page, src, readRepo) {
			t.Error(b)
		}
	}
	if n < 50 {
		t.Fatalf("found only %d links in the pages: the parser is broken", n)
	}
}

// TestLinkCheckerCatches shows the checker failing on what it must catch.
func TestLinkCheckerCatches(t *testing.T) {
	files := map[string]string{
		"docs/a.md": "# Page A\n\n## The `deed run` flags, again!\n\n## Twice\n\n## Twice\n\n<a id=\"x-1\"></a>\n",
	}
	read := func(p string) (string, error) {
		if s, ok := files[p]; ok {
			return s, nil
		}
		return "", os.ErrNotExist
	}
	for src, want := range map[string]int{
		"[ok](a.md#the-deed-run-flags-again) [ok](a.md#twice-1) [ok](#top) [ok](a.md#x-1)": 0,
		"[broken](b.md)":                      1,
		"[broken](a.md#no-such-heading)":      1,
		"[broken](a.md#twice-2)":              1,
		"[broken](../../x.md)":                1,
		"`[not a link](nowhere.md)`":          0,
		"```\n[not a link](nowhere.md)\n```":  0,
		"[ref]: nowhere.md":                   1,
		"[external](https://example.com/x#y)": 0,
	} {
		page := "# Top\n\n" + src + "\n"
		files["docs/p.md"] = page
		if got := checkLinks(t, "docs/p.md", page, read); len(got) != want {
			t.Errorf("%q: %d problems, want %d: %q", src, len(got), want, got)
		}
	}
}
