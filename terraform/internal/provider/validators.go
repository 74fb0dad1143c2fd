package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
)

// The validators check at plan time what the server would refuse at apply,
// in the server's words: the bounds come from the API's contract packages.

type int64Between struct{ min, max int64 }

// between accepts integers from min to max.
func between(min, max int64) validator.Int64 { return int64Between{min, max} }

func (v int64Between) Description(context.Context) string {
	return fmt.Sprintf("must be %d to %d", v.min, v.max)
}
func (v int64Between) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v int64Between) ValidateInt64(_ context.Context, req validator.Int64Request, resp *validator.Int64Response) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if n := req.ConfigValue.ValueInt64(); n < v.min || n > v.max {
		resp.Diagnostics.AddAttributeError(req.Path, "Value out of range", fmt.Sprintf("%s is %d; it must be %d to %d", req.Path, n, v.min, v.max))
	}
}

// namePattern is the API's rule for names and namespaces (a DNS label).
var namePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

const maxNameBytes = 63

type nameValidator struct{}

// isName accepts the API's names: at most 63 lower-case letters, digits
// and "-", starting and ending with a letter or digit.
func isName() validator.String { return nameValidator{} }

func (nameValidator) Description(context.Context) string {
	return "at most 63 lower-case letters, digits and -, starting and ending with a letter or digit"
}
func (v nameValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v nameValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if s := req.ConfigValue.ValueString(); len(s) > maxNameBytes || !namePattern.MatchString(s) {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid name", fmt.Sprintf("%s %.70q must be %s", req.Path, s, v.Description(ctx)))
	}
}

type oneOfValidator []string

// oneOf accepts the given strings.
func oneOf(values ...string) validator.String { return oneOfValidator(values) }

func (v oneOfValidator) Description(context.Context) string {
	return "one of " + strings.Join(v, ", ")
}
func (v oneOfValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v oneOfValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if s := req.ConfigValue.ValueString(); !slices.Contains(v, s) {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid value", fmt.Sprintf("%s %.32q is not %s", req.Path, s, v.Description(ctx)))
	}
}

type jsonValidator struct{}

// isJSON accepts a JSON document, as jsonencode gives it.
func isJSON() validator.String { return jsonValidator{} }

func (jsonValidator) Description(context.Context) string { return "must be JSON (use jsonencode)" }
func (v jsonValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v jsonValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if !json.Valid([]byte(req.ConfigValue.ValueString())) {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid JSON", fmt.Sprintf("%s must be JSON; write it with jsonencode(...)", req.Path))
	}
}

// sameJSON reports whether a and b are the same JSON document up to
// whitespace (the server stores payloads compacted).
func sameJSON(a, b string) bool {
	return compactJSON(a) == compactJSON(b)
}

// compactJSON returns s compacted as the server stores it, "" for an empty
// document or null, and s unchanged when it is not JSON.
func compactJSON(s string) string {
	var buf bytes.Buffer
	if strings.TrimSpace(s) == "" || json.Compact(&buf, []byte(s)) != nil {
		return strings.TrimSpace(s)
	}
	if buf.String() == "null" {
		return ""
	}
	return buf.String()
}
