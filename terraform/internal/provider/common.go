package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// namespaceDefault plans a resource's namespace as the token's own when
// the configuration leaves it out, so that RequiresReplace after it sees a
// known value and an unchanged namespace plans no replacement.
type namespaceDefault struct{ data func() *providerData }

func (m namespaceDefault) Description(context.Context) string {
	return "defaults to the namespace of the provider's token"
}
func (m namespaceDefault) MarkdownDescription(ctx context.Context) string { return m.Description(ctx) }

func (m namespaceDefault) PlanModifyString(_ context.Context, req planmodifier.StringRequest, resp *planmodifier.StringResponse) {
	if !req.ConfigValue.IsNull() || req.Plan.Raw.IsNull() {
		return
	}
	if d := m.data(); d != nil {
		resp.PlanValue = types.StringValue(d.namespace)
	}
}

// importID parses an import id "namespace/name" into the resource's
// namespace and name attributes.
func importID(ctx context.Context, kind string, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	ns, name, ok := strings.Cut(req.ID, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		resp.Diagnostics.AddError("Invalid import id",
			fmt.Sprintf("Import a %s by namespace/name, e.g. default/hello; got %q.", kind, req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("namespace"), ns)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), name)...)
}

// apiError is the diagnostic of a failed API call: what was done to which
// object, and the server's own message.
func apiError(diags *diag.Diagnostics, what string, err error) {
	diags.AddError("sless: cannot "+what, err.Error())
}

// id is the id of an object: "namespace/name".
func id(ns, name string) string { return ns + "/" + name }

// stringOrNull returns s as a value, null when empty.
func stringOrNull(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}
