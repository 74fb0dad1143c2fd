package openapi

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"sless.kube5s.ru/sless/docs"
)

// TestDocumentIsCurrent fails while docs/openapi.json (which the server
// embeds and serves) is not what the code generates.
func TestDocumentIsCurrent(t *testing.T) {
	doc, err := Generate("../..")
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile("../../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, committed) {
		t.Fatal("docs/openapi.json is stale: run hack/generate.sh and commit the result")
	}
	if !bytes.Equal(docs.OpenAPI, committed) {
		t.Fatal("the embedded document differs from docs/openapi.json")
	}
}

// TestDocumentIsValid checks the document against OpenAPI 3.1 with
// kin-openapi: its structure, its references and its schemas.
func TestDocumentIsValid(t *testing.T) {
	doc := Load(t)
	if !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi %q, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("invalid document: %v", err)
	}
	for _, op := range Operations {
		item := doc.Paths.Value(op.OpenAPIPath())
		if item == nil || item.GetOperation(op.Methods()[0]) == nil {
			t.Errorf("%s %s is not in the document", op.Methods()[0], op.OpenAPIPath())
		}
	}
}

// TestRequestsRequireNothingClientsMayLeaveOut: a client may leave out
// every field the server fills in, so a request's schema requires only
// read-only fields, which requests do not send.
func TestRequestsRequireNothingClientsMayLeaveOut(t *testing.T) {
	doc := Load(t)
	for _, name := range []string{"Function", "Trigger", "Job", "TokenRequest"} {
		s := doc.Components.Schemas[name].Value
		for _, r := range s.Required {
			if !s.Properties[r].Value.ReadOnly {
				t.Errorf("schema %s requires %q, which a request may leave out", name, r)
			}
		}
	}
	// A minimal create is valid.
	fn := map[string]any{"name": "hello", "runtime": "python3.11"}
	if err := doc.Components.Schemas["Function"].Value.VisitJSON(fn, openapi3.EnableJSONSchema2020(), openapi3.VisitAsRequest()); err != nil {
		t.Errorf("a minimal function is refused: %v", err)
	}
	fn["runtime_version"] = "3.11"
	if err := doc.Components.Schemas["Function"].Value.VisitJSON(fn, openapi3.EnableJSONSchema2020(), openapi3.VisitAsRequest()); err == nil {
		t.Error("a function with an unknown field is accepted; the API refuses it")
	}
}

// Load returns docs/openapi.json as kin-openapi reads it.
func Load(t testing.TB) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(docs.OpenAPI)
	if err != nil {
		t.Fatalf("loading docs/openapi.json: %v", err)
	}
	return doc
}
