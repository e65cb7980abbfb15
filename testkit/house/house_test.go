// Package house checks the shape of the codebase itself: no source file
// too long to read in one sitting, no type with so many methods that it
// does more than one job, no type whose methods are spread over so many
// files that a reader cannot find them, and no function named in the
// path table of docs/architecture.md missing from the file named there
// (architecture_test.go). It has no code, only these tests, which
// `go test ./...` runs with the rest.
package house

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	// maxLines is the most lines a non-test, non-generated Go file may
	// have.
	maxLines = 600
	// maxMethods is the most methods (exported and not) one type may
	// have.
	maxMethods = 25
	// maxMethodFiles is the most files the methods of one type may be
	// written in: a type split over more to meet maxLines is one job too
	// many, not one file too few.
	maxMethodFiles = 3
)

// root is the module's root, two levels up from this package.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", dir, err)
	}
	return dir
}

// sources lists the module's Go files that the limits apply to: not
// tests, not generated, not under testdata or a hidden directory.
func sources(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != dir && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// generated reports whether a file carries the standard "Code generated
// ... DO NOT EDIT." line.
func generated(f *ast.File) bool {
	for _, c := range f.Comments {
		for _, l := range c.List {
			if strings.HasPrefix(l.Text, "// Code generated ") && strings.HasSuffix(l.Text, " DO NOT EDIT.") {
				return true
			}
		}
	}
	return false
}

func TestFileLengthAndMethodCounts(t *testing.T) {
	dir := root(t)
	fset := token.NewFileSet()
	methods := map[string]int{}           // "dir.Type" → methods
	files := map[string]map[string]bool{} // "dir.Type" → files with its methods
	for _, path := range sources(t, dir) {
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if generated(f) {
			continue
		}
		rel, _ := filepath.Rel(dir, path)
		if n := fset.File(f.Pos()).LineCount(); n > maxLines {
			t.Errorf("%s has %d lines, more than %d: split it by concern", rel, n, maxLines)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 {
				continue
			}
			typ := filepath.Dir(rel) + "." + receiver(fn.Recv.List[0].Type)
			methods[typ]++
			if files[typ] == nil {
				files[typ] = map[string]bool{}
			}
			files[typ][filepath.Base(rel)] = true
		}
	}
	for typ, n := range methods {
		if n > maxMethods {
			t.Errorf("type %s has %d methods, more than %d: give its jobs types of their own", typ, n, maxMethods)
		}
	}
	for typ, fs := range files {
		if len(fs) > maxMethodFiles {
			names := make([]string, 0, len(fs))
			for f := range fs {
				names = append(names, f)
			}
			slices.Sort(names)
			t.Errorf("type %s has methods in %d files (%s), more than %d: give its jobs types of their own",
				typ, len(fs), strings.Join(names, ", "), maxMethodFiles)
		}
	}
}

// receiver is a method receiver's type name, without * or type
// parameters.
func receiver(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiver(x.X)
	case *ast.IndexExpr:
		return receiver(x.X)
	case *ast.IndexListExpr:
		return receiver(x.X)
	case *ast.Ident:
		return x.Name
	}
	return "?"
}
