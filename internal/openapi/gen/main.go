// Command gen writes the OpenAPI document of the REST API to
// docs/openapi.json; hack/generate.sh runs it from the module's root.
package main

import (
	"fmt"
	"os"

	"sless.kube5s.ru/sless/internal/openapi"
)

func main() {
	doc, err := openapi.Generate(".")
	if err == nil {
		err = os.WriteFile("docs/openapi.json", doc, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "generating docs/openapi.json:", err)
		os.Exit(1)
	}
}
