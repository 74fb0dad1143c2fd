package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// planNamespace plans a resource's namespace: the configuration's, else
// the token's own, replacing the resource when it changes. It runs in
// ModifyPlan, not as an attribute plan modifier, because it needs the
// configured provider, which the framework hands to resources only.
func planNamespace(ctx context.Context, d *providerData, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	var ns types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("namespace"), &ns)...)
	if ns.IsNull() {
		ns = types.StringValue(d.namespace)
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("namespace"), ns)...)
	if req.State.Raw.IsNull() || ns.IsUnknown() {
		return
	}
	var prior types.String
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("namespace"), &prior)...)
	if !prior.Equal(ns) {
		resp.RequiresReplace = append(resp.RequiresReplace, path.Root("namespace"))
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
