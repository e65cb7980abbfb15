package house

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// step is one row of the path table of docs/architecture.md.
type step struct {
	num, fn, file string
	// decl is fn's declaration in file; nil when it is not there.
	decl *ast.FuncDecl
}

// TestArchitecturePath reads the table of the path of one chat request in
// docs/architecture.md and checks that the map cannot drift from the
// code: each function it names is declared in the file it names; each
// step after the first is called by a step above it (the nearest that
// calls it); and the steps one function calls are listed in the order it
// calls them, a deferred call running after the others, the last
// deferred first.
func TestArchitecturePath(t *testing.T) {
	dir := root(t)
	steps := pathTable(t, filepath.Join(dir, "docs", "architecture.md"))
	if len(steps) < 10 {
		t.Fatalf("found %d rows in the path table of docs/architecture.md; is the table still there?", len(steps))
	}
	for i := range steps {
		s := &steps[i]
		s.decl = declaration(t, filepath.Join(dir, filepath.FromSlash(s.file)), s.fn)
		if s.decl == nil {
			t.Errorf("docs/architecture.md step %s names %s in %s, which does not declare it", s.num, s.fn, s.file)
		}
	}
	if t.Failed() {
		return
	}
	// The first step hands the request to the mux, whose handlers
	// Server.routes registers: what they call, it calls.
	entry := calls(steps[0].decl)
	if routes := declaration(t, filepath.Join(dir, "proxy", "server.go"), "Server.routes"); routes != nil {
		for name, at := range calls(routes) {
			for _, p := range at {
				entry[name] = append(entry[name], p+math.MaxInt32)
			}
		}
	}
	called := make([]map[string][]int, len(steps))
	called[0] = entry
	for i := 1; i < len(steps); i++ {
		called[i] = calls(steps[i].decl)
	}
	// last[j] is the position, in step j's function, of the last step
	// found called by it.
	last := make([]int, len(steps))
	for i := range last {
		last[i] = -1
	}
	for i := 1; i < len(steps); i++ {
		name := callName(steps[i].fn)
		j := i - 1
		for ; j >= 0; j-- {
			if _, ok := called[j][name]; ok {
				break
			}
		}
		if j < 0 {
			t.Errorf("docs/architecture.md step %s (%s): no step above it calls it", steps[i].num, steps[i].fn)
			continue
		}
		// The first call of it after the step listed before it in the
		// same function.
		at := -1
		for _, p := range called[j][name] {
			if p >= last[j] && (at < 0 || p < at) {
				at = p
			}
		}
		if at < 0 {
			t.Errorf("docs/architecture.md step %s (%s) is listed after a step that %s calls later", steps[i].num, steps[i].fn, steps[j].fn)
			continue
		}
		last[j] = at
	}
}

// pathTable reads the rows of the path table in the doc at path.
func pathTable(t *testing.T, path string) []step {
	t.Helper()
	doc, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer doc.Close()
	var steps []step
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
		steps = append(steps, step{num: cells[0], fn: fn, file: file})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return steps
}

// unquote returns the text inside one pair of backticks, or "".
func unquote(cell string) string {
	if len(cell) < 2 || cell[0] != '`' || cell[len(cell)-1] != '`' {
		return ""
	}
	return cell[1 : len(cell)-1]
}

// callName is the name a call of fn ("Func" or "Type.Method") spells.
func callName(fn string) string {
	_, name, isMethod := strings.Cut(fn, ".")
	if !isMethod {
		return fn
	}
	return name
}

// declaration returns the declaration of fn, written as "Func" or
// "Type.Method", in the Go file at path; nil when it has none.
func declaration(t *testing.T, path, fn string) *ast.FuncDecl {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Errorf("%v", err)
		return nil
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
			return d
		}
		if typ != "" && d.Recv != nil && len(d.Recv.List) > 0 && receiver(d.Recv.List[0].Type) == typ {
			return d
		}
	}
	return nil
}

// calls maps the names d calls (x.Name(…) or Name(…), in closures too)
// to when it calls each, by position in its source; a call in a defer
// statement comes after every other, the last deferred first.
func calls(d *ast.FuncDecl) map[string][]int {
	out := map[string][]int{}
	if d.Body == nil {
		return out
	}
	var walk func(n ast.Node, deferred bool)
	walk = func(n ast.Node, deferred bool) {
		ast.Inspect(n, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.DeferStmt:
				if n != nil && !deferred {
					walk(x.Call, true)
					return false
				}
			case *ast.CallExpr:
				name := ""
				switch f := x.Fun.(type) {
				case *ast.Ident:
					name = f.Name
				case *ast.SelectorExpr:
					name = f.Sel.Name
				}
				at := int(x.Pos())
				if deferred {
					// Deferred calls run at the end, the last first.
					at = 4*math.MaxInt32 - at
				}
				if name != "" {
					out[name] = append(out[name], at)
				}
			}
			return true
		})
	}
	walk(d.Body, false)
	return out
}

// TestPlanWithoutHTTP: the planner knows nothing of HTTP. Package plan
// imports no net/http, so no *http.Request, header or response reaches
// it: the proxy reads what it needs into plan.Options at the edge.
func TestPlanWithoutHTTP(t *testing.T) {
	dir := filepath.Join(root(t), "plan")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range file.Imports {
			if path := strings.Trim(imp.Path.Value, `"`); strings.HasPrefix(path, "net/http") {
				t.Errorf("%s imports %s: the planner takes what it needs as plan.Options", filepath.Base(f), path)
			}
		}
	}
}
