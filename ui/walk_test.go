package ui

import "io/fs"

// fsWalk calls f with every embedded file.
func fsWalk(f func(path string, data []byte)) error {
	return fs.WalkDir(static, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := static.ReadFile(path)
		if err == nil {
			f(path, data)
		}
		return err
	})
}
