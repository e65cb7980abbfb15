package house

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestArchitecturePath reads the table of the path of one chat request in
// docs/architecture.md and checks that each function it names is declared
// in the file it names, so the map cannot drift from the code.
func TestArchitecturePath(t *testing.T) {
	dir := root(t)
	doc, err := os.Open(filepath.Join(dir, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer doc.Close()

	rows := 0
	inPath := false
	sc := bufio.NewScanner(doc)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			inPath = strings.Contains(line, "path of one chat request")
			continue
		}
		if !inPath || !strings.HasPrefix(line, "| ") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 4 || cells[0] == "#" || strings.HasPrefix(cells[0], "---") {
			continue
		}
		fn, file := unquote(cells[2]), unquote(cells[3])
		if fn == "" || file == "" {
			t.Errorf("row %q: want `function` and `file`", line)
			continue
		}
		rows++
		if !declares(t, filepath.Join(dir, filepath.FromSlash(file)), fn) {
			t.Errorf("docs/architecture.md step %s names %s in %s, which does not declare it", cells[0], fn, file)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if rows < 10 {
		t.Fatalf("found %d rows in the path table of docs/architecture.md; is the table still there?", rows)
	}
}

// unquote returns the text inside one pair of backticks, or "".
func unquote(cell string) string {
	if len(cell) < 2 || cell[0] != '`' || cell[len(cell)-1] != '`' {
		return ""
	}
	return cell[1 : len(cell)-1]
}

// declares reports whether the Go file at path declares fn, written as
// "Func" or "Type.Method".
func declares(t *testing.T, path, fn string) bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Errorf("%v", err)
		return false
	}
	typ, name, isMethod := strings.Cut(fn, ".")
	if !isMethod {
		name, typ = typ, ""
	}
	for _, decl := range f.Decls {
		d, ok := decl.(*ast.FuncDecl)
		if !ok || d.Name.Name != name {
			continue
		}
		if typ == "" && d.Recv == nil {
			return true
		}
		if typ != "" && d.Recv != nil && len(d.Recv.List) > 0 && receiver(d.Recv.List[0].Type) == typ {
			return true
		}
	}
	return false
}
