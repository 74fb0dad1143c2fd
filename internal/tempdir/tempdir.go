// Package tempdir makes the directories a server keeps in the system's temp
// directory: its instances' runtime directory, the sandboxes of confined
// tools, the Python compiler's. Their names start with Prefix, the server's
// pid and a dash, so that the next server removes what one that was killed
// left behind (modules/runtime/local does when it starts).
package tempdir

import (
	"fmt"
	"os"
)

// Prefix starts the name of every directory Make creates.
const Prefix = "sless-run-"

// Make creates a new directory in dir (the system's temp directory when
// empty) named Prefix, this process's pid, a dash, kind and a random
// suffix, and returns its path.
func Make(dir, kind string) (string, error) {
	return os.MkdirTemp(dir, fmt.Sprintf("%s%d-%s", Prefix, os.Getpid(), kind))
}
