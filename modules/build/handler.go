package build

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sless.kube5s.ru/sless/modules/runtime"
)

// Code is a function's code as a handler check sees it: an upload's archive
// (*safezip.Archive) or a build's extracted files.
type Code interface {
	// IsFile reports whether name, slash-separated and relative to the code
	// root, is a regular file, following symbolic links.
	IsFile(name string) bool
	// TopLevel lists the names at the code root, sorted, directories with a
	// trailing "/".
	TopLevel() []string
}

// maxListed bounds the names a missing handler's message lists.
const maxListed = 20

// CheckHandler returns a *Error when code has none of the files that may
// hold handler's module (a malformed handler is one too). Its message lists
// what is at the top level, to help spot a zip with an extra directory
// level.
func CheckHandler(p runtime.Provider, handler string, code Code) error {
	files, err := p.HandlerFiles(handler)
	if err != nil {
		return &Error{Msg: err.Error(), Err: err}
	}
	for _, f := range files {
		if code.IsFile(f) {
			return nil
		}
	}
	top := code.TopLevel()
	if len(top) > maxListed {
		top = append(top[:maxListed], "...")
	}
	has := "which is empty"
	if len(top) > 0 {
		has = "which has at its top level: " + strings.Join(top, ", ")
	}
	return &Error{Msg: fmt.Sprintf("the handler file is missing: handler %q needs %s in the uploaded code, %s",
		handler, strings.Join(files, " or "), has)}
}

// DirCode is code extracted into a directory, as CheckHandler sees it.
type DirCode string

// IsFile implements Code.
func (d DirCode) IsFile(name string) bool {
	st, err := os.Stat(filepath.Join(string(d), filepath.FromSlash(name)))
	return err == nil && st.Mode().IsRegular()
}

// TopLevel implements Code.
func (d DirCode) TopLevel() []string {
	entries, _ := os.ReadDir(string(d))
	var top []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			name += "/"
		}
		top = append(top, name)
	}
	return top
}
