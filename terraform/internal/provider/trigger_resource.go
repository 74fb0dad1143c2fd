package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"sless.kube5s.ru/sless/client"
	"sless.kube5s.ru/sless/modules/triggers"
	"sless.kube5s.ru/sless/modules/triggers/rabbitmq"
)

// triggerWait bounds the waits for the server to apply a trigger and to
// remove it.
const triggerWait = 2 * time.Minute

func newTriggerResource() resource.Resource { return &triggerResource{} }

type triggerResource struct{ data *providerData }

var (
	_ resource.ResourceWithConfigure      = (*triggerResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*triggerResource)(nil)
	_ resource.ResourceWithImportState    = (*triggerResource)(nil)
	_ resource.ResourceWithValidateConfig = (*triggerResource)(nil)
)

type triggerModel struct {
	ID        types.String `tfsdk:"id"`
	Name      types.String `tfsdk:"name"`
	Namespace types.String `tfsdk:"namespace"`
	Function  types.String `tfsdk:"function"`
	Type      types.String `tfsdk:"type"`
	Enabled   types.Bool   `tfsdk:"enabled"`
	// http
	Auth    types.String `tfsdk:"auth"`
	Ingress types.Object `tfsdk:"ingress"`
	// cron
	Schedule          types.String `tfsdk:"schedule"`
	Timezone          types.String `tfsdk:"timezone"`
	Payload           types.String `tfsdk:"payload"`
	ConcurrencyPolicy types.String `tfsdk:"concurrency_policy"`
	PrewarmSeconds    types.Int64  `tfsdk:"prewarm_seconds"`
	// rabbitmq
	URL                types.String `tfsdk:"url"`
	Queue              types.String `tfsdk:"queue"`
	Exchange           types.String `tfsdk:"exchange"`
	RoutingKey         types.String `tfsdk:"routing_key"`
	Prefetch           types.Int64  `tfsdk:"prefetch"`
	MaxRetries         types.Int64  `tfsdk:"max_retries"`
	DeadLetterExchange types.String `tfsdk:"dead_letter_exchange"`
	DeadLetterQueue    types.String `tfsdk:"dead_letter_queue"`
	// status
	Phase      types.String `tfsdk:"phase"`
	Message    types.String `tfsdk:"message"`
	NextFireAt types.String `tfsdk:"next_fire_at"`
}

// typeField is an attribute that belongs to one trigger type.
type typeField struct {
	name, typ string
	value     func(*triggerModel) attrValue
	// def is the server's default for the type, planned when unset; nil
	// when the field has none.
	def attrValue
}

type attrValue interface {
	IsNull() bool
	IsUnknown() bool
}

// typeFields lists the type fields with the REST API's names.
var typeFields = []typeField{
	{"auth", triggers.TypeHTTP, func(m *triggerModel) attrValue { return m.Auth }, types.StringValue(triggers.AuthNone)},
	{"ingress", triggers.TypeHTTP, func(m *triggerModel) attrValue { return m.Ingress }, nil},
	{"schedule", triggers.TypeCron, func(m *triggerModel) attrValue { return m.Schedule }, nil},
	{"timezone", triggers.TypeCron, func(m *triggerModel) attrValue { return m.Timezone }, nil},
	{"payload", triggers.TypeCron, func(m *triggerModel) attrValue { return m.Payload }, nil},
	{"concurrency_policy", triggers.TypeCron, func(m *triggerModel) attrValue { return m.ConcurrencyPolicy }, types.StringValue(triggers.PolicyAllow)},
	{"prewarm_seconds", triggers.TypeCron, func(m *triggerModel) attrValue { return m.PrewarmSeconds }, nil},
	{"url", triggers.TypeRabbitMQ, func(m *triggerModel) attrValue { return m.URL }, nil},
	{"queue", triggers.TypeRabbitMQ, func(m *triggerModel) attrValue { return m.Queue }, nil},
	{"exchange", triggers.TypeRabbitMQ, func(m *triggerModel) attrValue { return m.Exchange }, nil},
	{"routing_key", triggers.TypeRabbitMQ, func(m *triggerModel) attrValue { return m.RoutingKey }, nil},
	{"prefetch", triggers.TypeRabbitMQ, func(m *triggerModel) attrValue { return m.Prefetch }, types.Int64Value(rabbitmq.DefaultPrefetch)},
	{"max_retries", triggers.TypeRabbitMQ, func(m *triggerModel) attrValue { return m.MaxRetries }, types.Int64Value(rabbitmq.DefaultMaxRetries)},
	{"dead_letter_exchange", triggers.TypeRabbitMQ, func(m *triggerModel) attrValue { return m.DeadLetterExchange }, nil},
	{"dead_letter_queue", triggers.TypeRabbitMQ, func(m *triggerModel) attrValue { return m.DeadLetterQueue }, nil},
}

// ingressTypes are the attributes of ingress, with the REST API's names.
var ingressTypes = map[string]attr.Type{"host": types.StringType, "class_name": types.StringType, "tls_secret": types.StringType}

func (r *triggerResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_trigger"
}

func (r *triggerResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = dataFrom(req.ProviderData, &resp.Diagnostics)
}

func (r *triggerResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	str := func(description string) schema.StringAttribute {
		return schema.StringAttribute{Optional: true, Description: description}
	}
	resp.Schema = schema.Schema{
		Description: "A trigger that runs a function: on /fn (http), on a cron schedule or for each RabbitMQ message. " +
			"A field of another type than the trigger's is an error at plan time.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed: true, Description: "namespace/name.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"name": schema.StringAttribute{
				Required: true, Description: "The trigger's name; changing it replaces the trigger.",
				Validators:    []validator.String{isName()},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"namespace": schema.StringAttribute{
				Optional: true, Computed: true,
				Description: "The namespace; default: the provider token's own. Changing it replaces the trigger.",
				Validators:  []validator.String{isName()},
			},
			"function": schema.StringAttribute{
				Required: true, Description: "The function it runs, in the same namespace.",
				Validators: []validator.String{isName()},
			},
			"type": schema.StringAttribute{
				Required: true, Description: "http, cron or rabbitmq; changing it replaces the trigger.",
				Validators:    []validator.String{oneOf(triggers.TypeHTTP, triggers.TypeCron, triggers.TypeRabbitMQ)},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"enabled": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(true),
				Description: "Default true; changing it toggles the trigger in place. A function whose http triggers are all disabled answers 404 on /fn and scales to zero.",
			},
			"auth": schema.StringAttribute{
				Optional: true, Computed: true, Description: "http: none (default, public) or token (callers of /fn need a token of the namespace).",
				Validators: []validator.String{oneOf(triggers.AuthNone, triggers.AuthToken)},
			},
			"ingress": schema.SingleNestedAttribute{
				Optional: true,
				Description: "http, kubernetes mode only (the embedded mode refuses it): an Ingress, in the sless server's namespace, " +
					"that routes host's /fn/{namespace}/{function} to the sless server, while the trigger is enabled.",
				Attributes: map[string]schema.Attribute{
					"host":       schema.StringAttribute{Required: true, Description: "The DNS name the Ingress serves, such as hello.example.com."},
					"class_name": str("The IngressClass; default: the cluster's default class."),
					"tls_secret": str("A kubernetes.io/tls Secret of the sless server's namespace with the host's certificate; default: plain HTTP."),
				},
			},
			"schedule": str("cron: a 5-field expression, a descriptor (@hourly) or @every 30s. Required for cron."),
			"timezone": str("cron: IANA time zone of the schedule; default UTC."),
			"payload": schema.StringAttribute{
				Optional: true, Description: "cron: the JSON event of every run, e.g. jsonencode({full = true}).",
				Validators: []validator.String{isJSON()},
			},
			"concurrency_policy": schema.StringAttribute{
				Optional: true, Computed: true, Description: "cron: Allow (default), Forbid or Replace, for a run that would overlap the previous one.",
				Validators: []validator.String{oneOf(triggers.PolicyAllow, triggers.PolicyForbid, triggers.PolicyReplace)},
			},
			"prewarm_seconds": schema.Int64Attribute{
				Optional: true, Description: "cron: start an instance this long before each run, 0 to 3600.",
				Validators: []validator.Int64{between(0, 3600)},
			},
			"url": schema.StringAttribute{
				Optional: true, Sensitive: true, Description: "rabbitmq: the broker, amqp:// or amqps://, with credentials. Required for rabbitmq.",
			},
			"queue":       str("rabbitmq: the queue consumed (declared durable when missing). Required for rabbitmq."),
			"exchange":    str("rabbitmq: an exchange to bind the queue to."),
			"routing_key": str("rabbitmq: the binding's routing key (needs exchange)."),
			"prefetch": schema.Int64Attribute{
				Optional: true, Computed: true, Description: fmt.Sprintf("rabbitmq: most messages run at once, 1 to 1000; default %d.", rabbitmq.DefaultPrefetch),
				Validators: []validator.Int64{between(1, 1000)},
			},
			"max_retries": schema.Int64Attribute{
				Optional: true, Computed: true, Description: fmt.Sprintf("rabbitmq: retries of a failed message before it is dead-lettered, 0 to 100; default %d.", rabbitmq.DefaultMaxRetries),
				Validators: []validator.Int64{between(0, 100)},
			},
			"dead_letter_exchange": str("rabbitmq: where messages that failed every retry go (or dead_letter_queue)."),
			"dead_letter_queue":    str("rabbitmq: a queue for the messages that failed every retry (or dead_letter_exchange)."),
			"phase":                schema.StringAttribute{Computed: true, Description: "Active, Disabled or Error."},
			"message":              schema.StringAttribute{Computed: true, Description: "Why the trigger is in the Error phase."},
			"next_fire_at":         schema.StringAttribute{Computed: true, Description: "cron: the next run (RFC 3339)."},
		},
	}
}

func (r *triggerResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var cfg triggerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() || cfg.Type.IsUnknown() || cfg.Type.IsNull() {
		return
	}
	typ := cfg.Type.ValueString()
	for _, f := range typeFields {
		if v := f.value(&cfg); f.typ != typ && !v.IsNull() {
			resp.Diagnostics.AddAttributeError(path.Root(f.name), "Field of another trigger type",
				fmt.Sprintf("%s is a field of %s triggers, not of %s triggers", f.name, f.typ, typ))
		}
	}
	required := map[string][]string{triggers.TypeCron: {"schedule"}, triggers.TypeRabbitMQ: {"url", "queue"}}
	for _, f := range typeFields {
		for _, name := range required[typ] {
			if f.name == name && f.value(&cfg).IsNull() {
				resp.Diagnostics.AddAttributeError(path.Root(name), "Missing field", fmt.Sprintf("%s is required for %s triggers", name, typ))
			}
		}
	}
	if typ == triggers.TypeRabbitMQ && !cfg.RoutingKey.IsNull() && cfg.Exchange.IsNull() {
		resp.Diagnostics.AddAttributeError(path.Root("routing_key"), "routing_key without exchange", "routing_key needs an exchange to bind the queue to")
	}
	if !cfg.DeadLetterExchange.IsNull() && !cfg.DeadLetterQueue.IsNull() {
		resp.Diagnostics.AddAttributeError(path.Root("dead_letter_queue"), "Two dead-letter targets", "set dead_letter_exchange or dead_letter_queue, not both")
	}
}

// ModifyPlan plans the server's defaults of the trigger's type (auth,
// concurrency_policy, prefetch, max_retries) and null for the other types'.
func (r *triggerResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.data == nil {
		return
	}
	planNamespace(ctx, r.data, req, resp)
	var plan, cfg triggerModel
	resp.Diagnostics.Append(resp.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() || plan.Type.IsUnknown() {
		return
	}
	for _, f := range typeFields {
		if f.def == nil || !f.value(&cfg).IsNull() {
			continue
		}
		var v attrValue = types.StringNull()
		if _, ok := f.def.(types.Int64); ok {
			v = types.Int64Null()
		}
		if f.typ == plan.Type.ValueString() {
			v = f.def
		}
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root(f.name), v)...)
	}
	if !plan.Namespace.IsUnknown() && !plan.Name.IsUnknown() {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("id"), id(plan.Namespace.ValueString(), plan.Name.ValueString()))...)
	}
}

// trigger returns the trigger m describes, for a create or a PUT.
func (m *triggerModel) trigger() *triggers.Trigger {
	enabled := m.Enabled.ValueBool()
	t := &triggers.Trigger{
		Name: m.Name.ValueString(), Namespace: m.Namespace.ValueString(),
		Spec: triggers.Spec{
			Function: m.Function.ValueString(), Type: m.Type.ValueString(), Enabled: &enabled,
			HTTPSpec: triggers.HTTPSpec{Auth: m.Auth.ValueString()},
			CronSpec: triggers.CronSpec{
				Schedule: m.Schedule.ValueString(), Timezone: m.Timezone.ValueString(),
				ConcurrencyPolicy: m.ConcurrencyPolicy.ValueString(), PrewarmSeconds: int(m.PrewarmSeconds.ValueInt64()),
			},
			RabbitMQSpec: triggers.RabbitMQSpec{
				URL: m.URL.ValueString(), Queue: m.Queue.ValueString(), Exchange: m.Exchange.ValueString(),
				RoutingKey: m.RoutingKey.ValueString(), Prefetch: int(m.Prefetch.ValueInt64()),
				DeadLetterExchange: m.DeadLetterExchange.ValueString(), DeadLetterQueue: m.DeadLetterQueue.ValueString(),
			},
		},
	}
	if p := m.Payload.ValueString(); p != "" {
		t.Payload = json.RawMessage(p)
	}
	if !m.MaxRetries.IsNull() && !m.MaxRetries.IsUnknown() {
		n := int(m.MaxRetries.ValueInt64())
		t.MaxRetries = &n
	}
	if !m.Ingress.IsNull() && !m.Ingress.IsUnknown() {
		a := m.Ingress.Attributes()
		value := func(name string) string {
			s, _ := a[name].(types.String)
			return s.ValueString()
		}
		t.Ingress = &triggers.IngressSpec{Host: value("host"), ClassName: value("class_name"), TLSSecret: value("tls_secret")}
	}
	return t
}

// fromAPI sets m from the trigger as the server shows it. A payload equal
// to m's up to whitespace and a URL whose redacted form the server shows
// keep m's text; anything else is drift and takes the server's.
func (m *triggerModel) fromAPI(t *triggers.Trigger) {
	m.ID = types.StringValue(id(t.Namespace, t.Name))
	m.Name, m.Namespace = types.StringValue(t.Name), types.StringValue(t.Namespace)
	m.Function, m.Type = types.StringValue(t.Function), types.StringValue(t.Type)
	m.Enabled = types.BoolValue(t.IsEnabled())
	m.Auth = stringOrNull(t.Auth)
	m.Ingress = types.ObjectNull(ingressTypes)
	if in := t.Ingress; in != nil {
		m.Ingress = types.ObjectValueMust(ingressTypes, map[string]attr.Value{"host": types.StringValue(in.Host),
			"class_name": stringOrNull(in.ClassName), "tls_secret": stringOrNull(in.TLSSecret)})
	}
	m.Schedule, m.Timezone = stringOrNull(t.Schedule), stringOrNull(t.Timezone)
	if !sameJSON(m.Payload.ValueString(), string(t.Payload)) {
		m.Payload = stringOrNull(string(t.Payload))
	}
	m.ConcurrencyPolicy = stringOrNull(t.ConcurrencyPolicy)
	m.PrewarmSeconds = int64OrNull(t.PrewarmSeconds)
	if m.URL.IsNull() || m.URL.IsUnknown() || rabbitmq.RedactURL(m.URL.ValueString()) != t.URL {
		m.URL = stringOrNull(t.URL)
	}
	m.Queue, m.Exchange, m.RoutingKey = stringOrNull(t.Queue), stringOrNull(t.Exchange), stringOrNull(t.RoutingKey)
	m.Prefetch = int64OrNull(t.Prefetch)
	m.MaxRetries = types.Int64Null()
	if t.MaxRetries != nil {
		m.MaxRetries = types.Int64Value(int64(*t.MaxRetries))
	}
	m.DeadLetterExchange, m.DeadLetterQueue = stringOrNull(t.DeadLetterExchange), stringOrNull(t.DeadLetterQueue)
	m.Phase, m.Message = types.StringValue(t.Status.Phase), types.StringValue(t.Status.Message)
	m.NextFireAt = types.StringNull()
	if t.Status.NextFireAt != nil {
		m.NextFireAt = types.StringValue(t.Status.NextFireAt.UTC().Format(time.RFC3339))
	}
}

func int64OrNull(n int) types.Int64 {
	if n == 0 {
		return types.Int64Null()
	}
	return types.Int64Value(int64(n))
}

// applied waits until the server applied t's generation and sets m from
// it; a trigger that ends in the Error phase is a warning (the server
// retries a missing function or broker by itself).
func (r *triggerResource) applied(ctx context.Context, m *triggerModel, t *triggers.Trigger, diags *diag.Diagnostics) {
	ctx, cancel := context.WithTimeout(ctx, triggerWait)
	defer cancel()
	now, err := r.data.client.WaitTriggerApplied(ctx, t.Namespace, t.Name, t.Generation)
	// An active cron trigger reports its next run right after it was
	// applied: wait for it, so that next_fire_at is known after apply.
	for err == nil && now.Type == triggers.TypeCron && now.Status.Phase == triggers.PhaseActive && now.Status.NextFireAt == nil {
		select {
		case <-ctx.Done():
			err = fmt.Errorf("waiting for the next run of cron trigger %s: %w", id(t.Namespace, t.Name), ctx.Err())
		case <-time.After(50 * time.Millisecond):
			now, err = r.data.client.GetTrigger(ctx, t.Namespace, t.Name)
		}
	}
	if err != nil {
		diags.AddError("sless: trigger "+id(t.Namespace, t.Name)+" is not applied", err.Error())
		now = t
	} else if now.Status.Phase == triggers.PhaseError {
		diags.AddWarning("sless: trigger "+id(t.Namespace, t.Name)+" is in the Error phase", now.Status.Message)
	}
	m.fromAPI(now)
}

func (r *triggerResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan triggerModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	t, err := r.data.client.CreateTrigger(ctx, plan.trigger())
	if err != nil {
		apiError(&resp.Diagnostics, "create trigger "+id(plan.Namespace.ValueString(), plan.Name.ValueString()), err)
		return
	}
	r.applied(ctx, &plan, t, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *triggerResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state triggerModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	t, err := r.data.client.GetTrigger(ctx, state.Namespace.ValueString(), state.Name.ValueString())
	if client.IsNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		apiError(&resp.Diagnostics, "read trigger "+state.ID.ValueString(), err)
		return
	}
	state.fromAPI(t)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *triggerResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan triggerModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	t, err := r.data.client.UpdateTrigger(ctx, plan.trigger())
	if err != nil {
		apiError(&resp.Diagnostics, "update trigger "+id(plan.Namespace.ValueString(), plan.Name.ValueString()), err)
		return
	}
	r.applied(ctx, &plan, t, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// Delete returns once the trigger is gone: GET answers 404.
func (r *triggerResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state triggerModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c, ns, name := r.data.client, state.Namespace.ValueString(), state.Name.ValueString()
	if err := c.DeleteTrigger(ctx, ns, name); err != nil && !client.IsNotFound(err) {
		apiError(&resp.Diagnostics, "delete trigger "+id(ns, name), err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, triggerWait)
	defer cancel()
	if err := c.WaitTriggerGone(ctx, ns, name); err != nil {
		apiError(&resp.Diagnostics, "delete trigger "+id(ns, name), err)
	}
}

func (r *triggerResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importID(ctx, "trigger", req, resp)
}
