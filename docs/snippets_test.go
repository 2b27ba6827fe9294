package docs_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goBlock is one ```go block of a page.
type goBlock struct {
	page string
	line int // of the opening fence
	src  string
}

var goFence = regexp.MustCompile("^\\s*```go\\s*$")

// goBlocks returns every ```go block of src.
func goBlocks(page, src string) []goBlock {
	var out []goBlock
	lines := strings.Split(src, "\n")
	for i := 0; i < len(lines); i++ {
		if !goFence.MatchString(lines[i]) {
			continue
		}
		start := i
		var body []string
		for i++; i < len(lines) && !fence.MatchString(lines[i]); i++ {
			body = append(body, lines[i])
		}
		out = append(out, goBlock{page, start + 1, strings.Join(body, "\n") + "\n"})
	}
	return out
}

// vetBlocks type-checks and vets each block as a package of its own inside
// the module, so it is compiled against the module's own packages: in a
// temporary directory under docs/ whose name begins with "_", which the
// go command's ./... patterns skip, removed when the test ends. A block is
// a whole Go file without its package clause: imports, then functions or
// Examples. It returns the complaints, naming each block by page and line.
func vetBlocks(t *testing.T, blocks []goBlock) string {
	t.Helper()
	tmp, err := os.MkdirTemp(".", "_codeblocks-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var pkgs, problems []string
	for i, b := range blocks {
		pkg := fmt.Sprintf("block%d", i)
		dir := filepath.Join(tmp, pkg)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// The line directive makes the compiler name the page's own lines.
		src := fmt.Sprintf("package %s\n\n//line %s:%d\n%s", pkg, filepath.Join(root, b.page), b.line+1, b.src)
		for _, p := range ignoredErrors(src) {
			problems = append(problems, strings.TrimPrefix(p, root+string(filepath.Separator)))
		}
		// A _test.go file, so an Example is checked as one.
		if err := os.WriteFile(filepath.Join(dir, "block_test.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, "./docs/"+filepath.ToSlash(dir))
	}
	cmd := exec.Command("go", append([]string{"vet"}, pkgs...)...)
	cmd.Dir = root // so the go command names each page by its path in the repository (docs/<page>.md)
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.ReplaceAll(string(out), root+string(filepath.Separator), "")
		if msg == "" {
			msg = err.Error()
		}
		problems = append(problems, msg)
	}
	return strings.Join(problems, "\n")
}

// ignoredErrors reports the ways a block can drop an error that the
// compiler accepts: an assignment to the blank identifier alone (_ = f()),
// or a blank last result of a call, where Go functions return their error.
func ignoredErrors(src string) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "block.go", src, 0)
	if err != nil {
		return nil // go vet reports it
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Rhs) != 1 {
			return true
		}
		if _, call := as.Rhs[0].(*ast.CallExpr); !call {
			return true
		}
		if id, ok := as.Lhs[len(as.Lhs)-1].(*ast.Ident); ok && id.Name == "_" {
			out = append(out, fmt.Sprintf("%s: the ```go block drops a call's last result (its error?) into _",
				fset.Position(as.Pos())))
		}
		return true
	})
	return out
}

// TestGoBlocksBuild checks that every ```go block of README.md and docs/
// compiles against the module and passes go vet: no unused variable, no
// missing import, no call that does not match the API.
func TestGoBlocksBuild(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	var blocks []goBlock
	for _, page := range pages(t) {
		blocks = append(blocks, goBlocks(page, readPage(t, page))...)
	}
	if len(blocks) < 2 {
		t.Fatalf("found %d go blocks: the library page has two", len(blocks))
	}
	if msg := vetBlocks(t, blocks); msg != "" {
		t.Errorf("go blocks do not build:\n%s", msg)
	}
}

// TestGoBlockCheckerCatches shows the check failing on a block that does
// not build, as the library snippets once did.
func TestGoBlockCheckerCatches(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	bad := goBlocks("docs/bad.md", "# x\n\n```go\nimport \"github.com/deedkit/deed/daemon/client\"\n\nfunc f() {\n\tc, err := client.New(\"http://x:1\", client.Options{})\n}\n```\n")
	msg := vetBlocks(t, bad)
	if !strings.Contains(msg, "declared and not used") || !strings.Contains(msg, "docs/bad.md:7") {
		t.Fatalf("want an unused-variable error naming docs/bad.md:7, got:\n%s", msg)
	}
	dropped := goBlocks("docs/bad.md", "```go\nimport \"os\"\n\nfunc g() {\n\tf, _ := os.Open(\"x\")\n\t_ = f.Close()\n}\n```\n")
	if msg := vetBlocks(t, dropped); strings.Count(msg, "drops a call's last result") != 2 {
		t.Fatalf("want two dropped errors, got:\n%s", msg)
	}
}
