package openapi

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
)

// module is the Go module whose source the descriptions are read from.
const module = "sless.kube5s.ru/sless"

// sourceDocs reads the doc comments of types and struct fields from the
// module's source, so that the document describes every field in the words
// of its Go declaration.
type sourceDocs struct {
	root string
	// pkgs maps a package path to its types' docs, read once.
	pkgs map[string]map[string]*typeDocs
	err  error
}

type typeDocs struct {
	doc    string
	fields map[string]string
}

func newSourceDocs(root string) *sourceDocs {
	return &sourceDocs{root: root, pkgs: map[string]map[string]*typeDocs{}}
}

func (d *sourceDocs) lookup(t reflect.Type) *typeDocs {
	pkg := t.PkgPath()
	rel, ok := strings.CutPrefix(pkg, module+"/")
	if !ok {
		return nil
	}
	types, ok := d.pkgs[pkg]
	if !ok {
		var err error
		types, err = parseDocs(filepath.Join(d.root, rel))
		if err != nil && d.err == nil {
			d.err = err
		}
		d.pkgs[pkg] = types
	}
	return types[baseName(t)]
}

// typeDoc is t's doc comment on one line, "" without one.
func (d *sourceDocs) typeDoc(t reflect.Type) string {
	if td := d.lookup(t); td != nil {
		return td.doc
	}
	return ""
}

// fieldDoc is the doc comment of t's field (by its Go name) on one line.
func (d *sourceDocs) fieldDoc(t reflect.Type, field string) string {
	if td := d.lookup(t); td != nil {
		return td.fields[field]
	}
	return ""
}

// parseDocs reads the docs of the struct types declared in dir's non-test
// Go files.
func parseDocs(dir string) (map[string]*typeDocs, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the doc comments of %s: %w", dir, err)
	}
	types := map[string]*typeDocs{}
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("reading the doc comments of %s: %w", dir, err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil && len(gd.Specs) == 1 {
					doc = gd.Doc
				}
				td := &typeDocs{doc: oneLine(doc), fields: map[string]string{}}
				if st, ok := ts.Type.(*ast.StructType); ok {
					for _, field := range st.Fields.List {
						text := oneLine(field.Doc)
						if text == "" {
							text = oneLine(field.Comment)
						}
						for _, n := range field.Names {
							td.fields[n.Name] = text
						}
					}
				}
				types[ts.Name.Name] = td
			}
		}
	}
	return types, nil
}

// oneLine joins a comment's lines.
func oneLine(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	return strings.Join(strings.Fields(g.Text()), " ")
}
