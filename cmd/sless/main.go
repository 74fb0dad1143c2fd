// Command sless is the sless server and CLI in one binary.
//
// This file is the manifest of the binary: to add a runtime (or any other
// plugin), import its package and add its module to plugins. See
// docs/plugins.md.
package main

import (
	"os"

	"go.uber.org/fx"

	"sless.kube5s.ru/sless/cli"
	"sless.kube5s.ru/sless/modules/runtime/sandbox"
)

// plugins are added to the server next to the built-in modules.
var plugins = []fx.Option{
	// myruntime.Module,
}

func main() {
	// A re-exec of this binary as a sandbox's init never returns from Init.
	sandbox.Init()
	os.Exit(cli.Main(os.Args[1:], plugins...))
}
