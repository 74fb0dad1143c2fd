package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"sless.kube5s.ru/sless/modules/invoke"
)

func newFunctionDataSource() datasource.DataSource { return &functionDataSource{} }

type functionDataSource struct{ data *providerData }

type functionDataModel struct {
	Name               types.String `tfsdk:"name"`
	Namespace          types.String `tfsdk:"namespace"`
	Runtime            types.String `tfsdk:"runtime"`
	Handler            types.String `tfsdk:"handler"`
	Env                types.Map    `tfsdk:"env"`
	TimeoutSeconds     types.Int64  `tfsdk:"timeout_seconds"`
	MemoryMB           types.Int64  `tfsdk:"memory_mb"`
	MinInstances       types.Int64  `tfsdk:"min_instances"`
	MaxInstances       types.Int64  `tfsdk:"max_instances"`
	Concurrency        types.Int64  `tfsdk:"concurrency"`
	Egress             types.String `tfsdk:"egress"`
	CodeSHA256         types.String `tfsdk:"code_sha256"`
	Generation         types.Int64  `tfsdk:"generation"`
	Phase              types.String `tfsdk:"phase"`
	Message            types.String `tfsdk:"message"`
	BuildLog           types.String `tfsdk:"build_log"`
	ServingCodeSHA256  types.String `tfsdk:"serving_code_sha256"`
	ObservedGeneration types.Int64  `tfsdk:"observed_generation"`
	InvokeURL          types.String `tfsdk:"invoke_url"`
}

func (d *functionDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_function"
}

func (d *functionDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.data = dataFrom(req.ProviderData, &resp.Diagnostics)
}

func (d *functionDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	computed := func(description string) schema.StringAttribute {
		return schema.StringAttribute{Computed: true, Description: description}
	}
	num := func(description string) schema.Int64Attribute {
		return schema.Int64Attribute{Computed: true, Description: description}
	}
	resp.Schema = schema.Schema{
		Description: "A function's spec, status and URL, as GET /v1/namespaces/{ns}/functions/{name} shows them.",
		Attributes: map[string]schema.Attribute{
			"name":                schema.StringAttribute{Required: true, Description: "The function's name.", Validators: []validator.String{isName()}},
			"namespace":           schema.StringAttribute{Optional: true, Computed: true, Description: "Default: the provider token's namespace.", Validators: []validator.String{isName()}},
			"runtime":             computed("The runtime."),
			"handler":             computed("<file>.<function>."),
			"env":                 schema.MapAttribute{Computed: true, Sensitive: true, ElementType: types.StringType, Description: "The environment (sensitive: it may hold secrets)."},
			"timeout_seconds":     num("Longest one invocation may take."),
			"memory_mb":           num("Memory of one instance in MiB."),
			"min_instances":       num("Instances kept warm."),
			"max_instances":       num("Most instances."),
			"concurrency":         num("Invocations one instance takes at once."),
			"egress":              computed("What instances may reach: all or public."),
			"code_sha256":         computed("SHA-256 of the last uploaded zip."),
			"generation":          num("Increases on every change of the spec or code."),
			"phase":               computed("Pending, Building, Ready or Failed."),
			"message":             computed("Why the function is Failed."),
			"build_log":           computed("Output of the last build that produced any."),
			"serving_code_sha256": computed("SHA-256 of the code whose build serves invocations."),
			"observed_generation": num("The generation the status describes."),
			"invoke_url":          computed("The /fn URL."),
		},
	}
}

func (d *functionDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m functionDataModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ns := m.Namespace.ValueString()
	if ns == "" {
		ns = d.data.namespace
	}
	c := d.data.client
	fn, err := c.GetFunction(ctx, ns, m.Name.ValueString())
	if err != nil {
		apiError(&resp.Diagnostics, "read function "+id(ns, m.Name.ValueString()), err)
		return
	}
	m.Namespace, m.Runtime, m.Handler = types.StringValue(fn.Namespace), types.StringValue(fn.Runtime), types.StringValue(fn.Handler)
	env, diags := types.MapValueFrom(ctx, types.StringType, fn.Env)
	resp.Diagnostics.Append(diags...)
	m.Env = env
	m.TimeoutSeconds, m.MemoryMB = types.Int64Value(int64(fn.TimeoutSeconds)), types.Int64Value(int64(fn.MemoryMB))
	m.MinInstances, m.MaxInstances = types.Int64Value(int64(fn.MinInstances)), types.Int64Value(int64(fn.MaxInstances))
	m.Concurrency, m.Egress = types.Int64Value(int64(fn.Concurrency)), types.StringValue(fn.Egress)
	m.CodeSHA256, m.Generation = types.StringValue(fn.CodeSHA256), types.Int64Value(fn.Generation)
	m.Phase, m.Message, m.BuildLog = types.StringValue(string(fn.Status.Phase)), types.StringValue(fn.Status.Message), types.StringValue(fn.Status.BuildLog)
	m.ServingCodeSHA256 = types.StringValue(fn.Status.CodeSHA256)
	m.ObservedGeneration = types.Int64Value(fn.Status.ObservedGeneration)
	m.InvokeURL = types.StringValue(c.InvokeURL(fn.Namespace, fn.Name))
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

func newInvocationsDataSource() datasource.DataSource { return &invocationsDataSource{} }

type invocationsDataSource struct{ data *providerData }

type invocationsModel struct {
	Function    types.String `tfsdk:"function"`
	Namespace   types.String `tfsdk:"namespace"`
	Status      types.String `tfsdk:"status"`
	TriggerKind types.String `tfsdk:"trigger_kind"`
	TriggerName types.String `tfsdk:"trigger_name"`
	Limit       types.Int64  `tfsdk:"limit"`
	Invocations types.List   `tfsdk:"invocations"`
}

// invocationAttrs are the attributes of one invocation.
var invocationAttrs = map[string]attr.Type{
	"id": types.StringType, "trigger_kind": types.StringType, "trigger_name": types.StringType,
	"method": types.StringType, "path": types.StringType, "started_at": types.StringType,
	"duration_ms": types.Float64Type, "cold_start": types.BoolType, "status_code": types.Int64Type,
	"error": types.StringType, "request_bytes": types.Int64Type, "response_bytes": types.Int64Type,
}

const (
	defaultInvocationsLimit = 20
	maxInvocationsLimit     = 500
)

func (d *invocationsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_invocations"
}

func (d *invocationsDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	d.data = dataFrom(req.ProviderData, &resp.Diagnostics)
}

func (d *invocationsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "The recent invocations of a function, newest first, with the REST API's filters.",
		Attributes: map[string]schema.Attribute{
			"function":     schema.StringAttribute{Required: true, Description: "The function's name.", Validators: []validator.String{isName()}},
			"namespace":    schema.StringAttribute{Optional: true, Computed: true, Description: "Default: the provider token's namespace.", Validators: []validator.String{isName()}},
			"status":       schema.StringAttribute{Optional: true, Description: "success (status below 400), error (400 and above) or one status code such as 504."},
			"trigger_kind": schema.StringAttribute{Optional: true, Description: "Only invocations caused by this kind: http, cli, cron, rabbitmq, job."},
			"trigger_name": schema.StringAttribute{Optional: true, Description: "Only invocations of the trigger or job of this name."},
			"limit": schema.Int64Attribute{
				Optional: true, Description: fmt.Sprintf("Most invocations returned, 1 to %d; default %d.", maxInvocationsLimit, defaultInvocationsLimit),
				Validators: []validator.Int64{between(1, maxInvocationsLimit)},
			},
			"invocations": schema.ListNestedAttribute{
				Computed: true, Description: "The invocations, newest first.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"id":             schema.StringAttribute{Computed: true, Description: "The invocation id (UUIDv7)."},
					"trigger_kind":   schema.StringAttribute{Computed: true, Description: "What caused it."},
					"trigger_name":   schema.StringAttribute{Computed: true, Description: "The trigger or job, if any."},
					"method":         schema.StringAttribute{Computed: true, Description: "The HTTP method."},
					"path":           schema.StringAttribute{Computed: true, Description: "The path below /fn/{ns}/{name}."},
					"started_at":     schema.StringAttribute{Computed: true, Description: "When it started (RFC 3339)."},
					"duration_ms":    schema.Float64Attribute{Computed: true, Description: "How long it took as the platform saw it."},
					"cold_start":     schema.BoolAttribute{Computed: true, Description: "Whether it started an instance."},
					"status_code":    schema.Int64Attribute{Computed: true, Description: "The HTTP status the caller got."},
					"error":          schema.StringAttribute{Computed: true, Description: "Why it failed."},
					"request_bytes":  schema.Int64Attribute{Computed: true, Description: "Size of the request body."},
					"response_bytes": schema.Int64Attribute{Computed: true, Description: "Size of the response body."},
				}},
			},
		},
	}
}

func (d *invocationsDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var m invocationsModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ns := m.Namespace.ValueString()
	if ns == "" {
		ns = d.data.namespace
	}
	limit := int64(defaultInvocationsLimit)
	if !m.Limit.IsNull() {
		limit = m.Limit.ValueInt64()
	}
	q := invoke.Query{Status: m.Status.ValueString(), TriggerKind: m.TriggerKind.ValueString(), TriggerName: m.TriggerName.ValueString(), Limit: int(limit)}
	recs, _, err := d.data.client.ListInvocations(ctx, ns, m.Function.ValueString(), q)
	if err != nil {
		apiError(&resp.Diagnostics, "list the invocations of "+id(ns, m.Function.ValueString()), err)
		return
	}
	items := make([]attr.Value, 0, len(recs))
	for _, rec := range recs {
		obj, diags := types.ObjectValue(invocationAttrs, map[string]attr.Value{
			"id": types.StringValue(rec.ID), "trigger_kind": types.StringValue(rec.TriggerKind), "trigger_name": types.StringValue(rec.TriggerName),
			"method": types.StringValue(rec.Method), "path": types.StringValue(rec.Path),
			"started_at":  types.StringValue(rec.StartedAt.UTC().Format(time.RFC3339Nano)),
			"duration_ms": types.Float64Value(rec.DurationMS), "cold_start": types.BoolValue(rec.ColdStart),
			"status_code": types.Int64Value(int64(rec.StatusCode)), "error": types.StringValue(rec.Error),
			"request_bytes": types.Int64Value(rec.RequestBytes), "response_bytes": types.Int64Value(rec.ResponseBytes),
		})
		resp.Diagnostics.Append(diags...)
		items = append(items, obj)
	}
	list, diags := types.ListValue(types.ObjectType{AttrTypes: invocationAttrs}, items)
	resp.Diagnostics.Append(diags...)
	m.Namespace, m.Invocations = types.StringValue(ns), list
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}
