package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"sless.kube5s.ru/sless/client"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/runtime"
)

// Defaults and bounds of the waits for a function to be Ready.
const (
	defaultBuildTimeoutSec = 600
	defaultWaitTimeoutSec  = 60
	maxWaitSec             = 3600
	// maxBuildLogInDiagnostic is how much of a build log's end a failed
	// apply shows.
	maxBuildLogInDiagnostic = 32 << 10
)

func newFunctionResource() resource.Resource { return &functionResource{} }

type functionResource struct{ data *providerData }

var (
	_ resource.ResourceWithConfigure      = (*functionResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*functionResource)(nil)
	_ resource.ResourceWithImportState    = (*functionResource)(nil)
	_ resource.ResourceWithValidateConfig = (*functionResource)(nil)
)

type functionModel struct {
	ID              types.String `tfsdk:"id"`
	Name            types.String `tfsdk:"name"`
	Namespace       types.String `tfsdk:"namespace"`
	Runtime         types.String `tfsdk:"runtime"`
	Handler         types.String `tfsdk:"handler"`
	Env             types.Map    `tfsdk:"env"`
	SecretEnv       types.Map    `tfsdk:"secret_env"`
	TimeoutSeconds  types.Int64  `tfsdk:"timeout_seconds"`
	MemoryMB        types.Int64  `tfsdk:"memory_mb"`
	MinInstances    types.Int64  `tfsdk:"min_instances"`
	MaxInstances    types.Int64  `tfsdk:"max_instances"`
	Concurrency     types.Int64  `tfsdk:"concurrency"`
	Egress          types.String `tfsdk:"egress"`
	SourceDir       types.String `tfsdk:"source_dir"`
	ZipFile         types.String `tfsdk:"zip_file"`
	BuildTimeoutSec types.Int64  `tfsdk:"build_timeout_sec"`
	WaitTimeoutSec  types.Int64  `tfsdk:"wait_timeout_sec"`
	Phase           types.String `tfsdk:"phase"`
	CodeSHA256      types.String `tfsdk:"code_sha256"`
	InvokeURL       types.String `tfsdk:"invoke_url"`
}

func (r *functionResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_function"
}

func (r *functionResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = dataFrom(req.ProviderData, &resp.Diagnostics)
}

func intAttr(description string, def, lo, hi int64) schema.Int64Attribute {
	return schema.Int64Attribute{
		Optional: true, Computed: true,
		Default:     int64default.StaticInt64(def),
		Description: fmt.Sprintf("%s, %d to %d; default %d.", description, lo, hi, def),
		Validators:  []validator.Int64{between(lo, hi)},
	}
}

func (r *functionResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A sless function: its settings and its code, built and Ready once apply returns.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed: true, Description: "namespace/name.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"name": schema.StringAttribute{
				Required: true, Description: "The function's name; changing it replaces the function.",
				Validators:    []validator.String{isName()},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"namespace": schema.StringAttribute{
				Optional: true, Computed: true,
				Description: "The namespace; default: the provider token's own. Changing it replaces the function.",
				Validators:  []validator.String{isName()},
			},
			"runtime": schema.StringAttribute{
				Required: true, Description: "A runtime of the server (GET /v1/runtimes), e.g. python3.11 or nodejs20.",
			},
			"handler": schema.StringAttribute{
				Optional: true, Computed: true,
				Description: "<file>.<function>; default: the runtime's default (handler.handle).",
			},
			"env": schema.MapAttribute{
				Optional: true, ElementType: types.StringType,
				Description: "The function's environment.",
			},
			"secret_env": schema.MapAttribute{
				Optional: true, Sensitive: true, ElementType: types.StringType,
				Description: "More environment, kept out of plan output; its names must not also be in env.",
			},
			"timeout_seconds": intAttr("Longest one invocation may take", functions.DefaultTimeoutSeconds, 1, functions.MaxTimeoutSeconds),
			"memory_mb":       intAttr("Memory of one instance in MiB", functions.DefaultMemoryMB, functions.MinMemoryMB, functions.MaxMemoryMB),
			"min_instances":   intAttr("Instances kept warm", 0, 0, functions.MaxInstancesLimit),
			"max_instances": schema.Int64Attribute{
				Optional: true, Computed: true,
				Description: fmt.Sprintf("Most instances, 1 to %d and at least min_instances; default %d (or min_instances when larger).", functions.MaxInstancesLimit, functions.DefaultMaxInstances),
				Validators:  []validator.Int64{between(1, functions.MaxInstancesLimit)},
			},
			"concurrency": intAttr("Invocations one instance takes at once", functions.DefaultConcurrency, 1, functions.MaxConcurrency),
			"egress": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(string(runtime.EgressAll)),
				Description: "What instances may reach over the network: all (default) or public (not the host, loopback or private ranges).",
				Validators:  []validator.String{oneOf(string(runtime.EgressAll), string(runtime.EgressPublic))},
			},
			"source_dir": schema.StringAttribute{
				Optional: true,
				Description: "Directory of the code, zipped like `sless deploy` does (leaving out what its .slessignore lists, and .git). " +
					"The zip's SHA-256 is the change key: an untouched directory plans no change. Set source_dir or zip_file.",
			},
			"zip_file": schema.StringAttribute{
				Optional: true, Description: "Path of a zip of the code; its SHA-256 is the change key. Set source_dir or zip_file.",
			},
			"build_timeout_sec": intAttr("Longest apply waits for a build once it started", defaultBuildTimeoutSec, 1, maxWaitSec),
			"wait_timeout_sec":  intAttr("Longest apply waits for the server to take up a change, outside a build", defaultWaitTimeoutSec, 1, maxWaitSec),
			"phase": schema.StringAttribute{
				Computed: true, Description: "Ready after a successful apply; Failed when the last build failed (the next plan then shows the change again).",
			},
			"code_sha256": schema.StringAttribute{
				Computed: true, Description: "SHA-256 of the uploaded zip whose build serves (or is to serve) the function.",
			},
			"invoke_url": schema.StringAttribute{
				Computed: true, Description: "The /fn URL of the function; it answers while the function has an enabled http trigger.",
			},
		},
	}
}

func (r *functionResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var cfg functionModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !cfg.SourceDir.IsUnknown() && !cfg.ZipFile.IsUnknown() && cfg.SourceDir.IsNull() == cfg.ZipFile.IsNull() {
		resp.Diagnostics.AddAttributeError(path.Root("source_dir"), "Set source_dir or zip_file",
			"A function's code comes from exactly one of source_dir (a directory) and zip_file (a zip).")
	}
	if !cfg.Env.IsUnknown() && !cfg.SecretEnv.IsUnknown() {
		for name := range cfg.SecretEnv.Elements() {
			if _, ok := cfg.Env.Elements()[name]; ok {
				resp.Diagnostics.AddAttributeError(path.Root("secret_env").AtMapKey(name), "Variable in env and secret_env",
					fmt.Sprintf("%s is set in both env and secret_env; keep it in one.", name))
			}
		}
	}
	for _, m := range []struct {
		attr string
		env  types.Map
	}{{"env", cfg.Env}, {"secret_env", cfg.SecretEnv}} {
		for name := range m.env.Elements() {
			if strings.HasPrefix(name, functions.ReservedEnvPrefix) {
				resp.Diagnostics.AddAttributeError(path.Root(m.attr).AtMapKey(name), "Reserved variable name",
					fmt.Sprintf("names starting with %s are reserved for the platform", functions.ReservedEnvPrefix))
			}
		}
	}
	if !cfg.MinInstances.IsNull() && !cfg.MaxInstances.IsNull() && cfg.MinInstances.ValueInt64() > cfg.MaxInstances.ValueInt64() {
		resp.Diagnostics.AddAttributeError(path.Root("min_instances"), "min_instances above max_instances",
			fmt.Sprintf("min_instances is %d; it must be 0 to max_instances (%d)", cfg.MinInstances.ValueInt64(), cfg.MaxInstances.ValueInt64()))
	}
}

// ModifyPlan plans what the server will hold: the runtime's default
// handler, max_instances' default, the code's SHA-256 from source_dir or
// zip_file, the URL, and phase Ready, so that a function whose last build
// failed plans its change again.
func (r *functionResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.data == nil {
		return
	}
	planNamespace(ctx, r.data, req, resp)
	var plan, cfg functionModel
	resp.Diagnostics.Append(resp.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !plan.Runtime.IsUnknown() {
		rt, known, ok, err := r.data.runtime(ctx, plan.Runtime.ValueString())
		switch {
		case err != nil:
			apiError(&resp.Diagnostics, "list the server's runtimes", err)
			return
		case !ok:
			slices.Sort(known)
			resp.Diagnostics.AddAttributeError(path.Root("runtime"), "Unknown runtime",
				fmt.Sprintf("runtime %.32q is not one of the server's: %s", plan.Runtime.ValueString(), strings.Join(known, ", ")))
			return
		case cfg.Handler.IsNull():
			plan.Handler = types.StringValue(rt.DefaultHandler)
		}
	} else if cfg.Handler.IsNull() {
		plan.Handler = types.StringUnknown()
	}
	if cfg.MaxInstances.IsNull() {
		if plan.MinInstances.IsUnknown() {
			plan.MaxInstances = types.Int64Unknown()
		} else {
			plan.MaxInstances = types.Int64Value(max(functions.DefaultMaxInstances, plan.MinInstances.ValueInt64()))
		}
	}
	if plan.SourceDir.IsUnknown() || plan.ZipFile.IsUnknown() {
		plan.CodeSHA256 = types.StringUnknown()
	} else {
		_, sum, err := plan.code()
		if err != nil {
			resp.Diagnostics.AddAttributeError(plan.codePath(), "Cannot read the function's code", err.Error())
			return
		}
		plan.CodeSHA256 = types.StringValue(sum)
	}
	if plan.Namespace.IsUnknown() || plan.Name.IsUnknown() {
		plan.ID, plan.InvokeURL = types.StringUnknown(), types.StringUnknown()
	} else {
		plan.ID = types.StringValue(id(plan.Namespace.ValueString(), plan.Name.ValueString()))
		plan.InvokeURL = types.StringValue(r.data.client.InvokeURL(plan.Namespace.ValueString(), plan.Name.ValueString()))
	}
	plan.Phase = types.StringValue(string(functions.PhaseReady))
	resp.Diagnostics.Append(resp.Plan.Set(ctx, &plan)...)
}

// code returns the zip of the function's code and its SHA-256.
func (m *functionModel) code() ([]byte, string, error) {
	if !m.SourceDir.IsNull() {
		return client.ZipDir(m.SourceDir.ValueString())
	}
	data, err := os.ReadFile(m.ZipFile.ValueString())
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(data)
	return data, hex.EncodeToString(sum[:]), nil
}

func (m *functionModel) codePath() path.Path {
	if !m.SourceDir.IsNull() {
		return path.Root("source_dir")
	}
	return path.Root("zip_file")
}

// env returns the function's whole environment: env and secret_env.
func (m *functionModel) env() map[string]string {
	out := map[string]string{}
	for _, em := range []types.Map{m.Env, m.SecretEnv} {
		for k, v := range em.Elements() {
			if s, ok := v.(types.String); ok {
				out[k] = s.ValueString()
			}
		}
	}
	return out
}

// function returns the function m describes, for a create or a PUT.
func (m *functionModel) function() *functions.Function {
	return &functions.Function{
		Name: m.Name.ValueString(), Namespace: m.Namespace.ValueString(),
		Spec: functions.Spec{
			Runtime: m.Runtime.ValueString(), Handler: m.Handler.ValueString(), Env: m.env(),
			TimeoutSeconds: int(m.TimeoutSeconds.ValueInt64()), MemoryMB: int(m.MemoryMB.ValueInt64()),
			MinInstances: int(m.MinInstances.ValueInt64()), MaxInstances: int(m.MaxInstances.ValueInt64()),
			Concurrency: int(m.Concurrency.ValueInt64()), Egress: m.Egress.ValueString(),
		},
	}
}

// sameSpec reports whether a and b are the same spec.
func sameSpec(a, b *functions.Spec) bool {
	return a.Runtime == b.Runtime && a.Handler == b.Handler && maps.Equal(a.Env, b.Env) &&
		a.TimeoutSeconds == b.TimeoutSeconds && a.MemoryMB == b.MemoryMB && a.MinInstances == b.MinInstances &&
		a.MaxInstances == b.MaxInstances && a.Concurrency == b.Concurrency && a.Egress == b.Egress
}

// builtCode is the code a function runs or is to run: its last upload,
// unless the build of the current generation failed, when it is the code
// that still serves (none at all after a first failed build). A failed
// build so leaves the change of code pending in the next plan.
func builtCode(fn *functions.Function) string {
	if fn.Status.Phase == functions.PhaseFailed && fn.Status.ObservedGeneration >= fn.Generation {
		return fn.Status.CodeSHA256
	}
	return fn.CodeSHA256
}

// fromAPI sets m from the function as the server shows it. Variables named
// in m's secret_env stay there; the provider's own settings (code source,
// waits) are kept, and take their defaults when unset (after an import).
func (m *functionModel) fromAPI(fn *functions.Function, c *client.Client) {
	m.ID = types.StringValue(id(fn.Namespace, fn.Name))
	m.Name, m.Namespace = types.StringValue(fn.Name), types.StringValue(fn.Namespace)
	m.Runtime, m.Handler = types.StringValue(fn.Runtime), types.StringValue(fn.Handler)
	env, secret := map[string]string{}, map[string]string{}
	for k, v := range fn.Env {
		if _, ok := m.SecretEnv.Elements()[k]; ok {
			secret[k] = v
		} else {
			env[k] = v
		}
	}
	m.Env, m.SecretEnv = stringMap(env, m.Env), stringMap(secret, m.SecretEnv)
	m.TimeoutSeconds = types.Int64Value(int64(fn.TimeoutSeconds))
	m.MemoryMB = types.Int64Value(int64(fn.MemoryMB))
	m.MinInstances = types.Int64Value(int64(fn.MinInstances))
	m.MaxInstances = types.Int64Value(int64(fn.MaxInstances))
	m.Concurrency = types.Int64Value(int64(fn.Concurrency))
	m.Egress = types.StringValue(fn.Egress)
	if m.BuildTimeoutSec.IsNull() || m.BuildTimeoutSec.IsUnknown() {
		m.BuildTimeoutSec = types.Int64Value(defaultBuildTimeoutSec)
	}
	if m.WaitTimeoutSec.IsNull() || m.WaitTimeoutSec.IsUnknown() {
		m.WaitTimeoutSec = types.Int64Value(defaultWaitTimeoutSec)
	}
	m.Phase = types.StringValue(string(fn.Status.Phase))
	m.CodeSHA256 = stringOrNull(builtCode(fn))
	m.InvokeURL = types.StringValue(c.InvokeURL(fn.Namespace, fn.Name))
}

// stringMap returns vals as a map value; an empty one keeps the form of
// prior (null or empty), so that env = {} and no env both plan no change.
func stringMap(vals map[string]string, prior types.Map) types.Map {
	if len(vals) == 0 {
		if !prior.IsNull() && !prior.IsUnknown() && len(prior.Elements()) == 0 {
			return prior
		}
		return types.MapNull(types.StringType)
	}
	m, _ := types.MapValueFrom(context.Background(), types.StringType, vals)
	return m
}

func (r *functionResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan functionModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	zip := plan.checkedCode(&resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	c := r.data.client
	fn, err := c.CreateFunction(ctx, plan.function())
	if err != nil {
		if ae, ok := err.(*client.APIError); ok && ae.StatusCode == 409 {
			resp.Diagnostics.AddError("sless: function already exists",
				fmt.Sprintf("%s\n\nTo manage it with Terraform, import it: terraform import <address> %s", err, id(plan.Namespace.ValueString(), plan.Name.ValueString())))
			return
		}
		apiError(&resp.Diagnostics, "create function "+id(plan.Namespace.ValueString(), plan.Name.ValueString()), err)
		return
	}
	// From here on the function exists: every outcome is saved to the
	// state (an error taints it, so that the next apply replaces it).
	r.deploy(ctx, &plan, fn, zip, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// checkedCode returns the zip of the planned code, failing when it is no
// longer what the plan hashed.
func (m *functionModel) checkedCode(diags *diag.Diagnostics) []byte {
	zip, sum, err := m.code()
	if err != nil {
		diags.AddAttributeError(m.codePath(), "Cannot read the function's code", err.Error())
		return nil
	}
	if !m.CodeSHA256.IsUnknown() && sum != m.CodeSHA256.ValueString() {
		diags.AddAttributeError(m.codePath(), "The function's code changed after the plan",
			fmt.Sprintf("The plan had code with SHA-256 %s, the code now has %s; plan again.", m.CodeSHA256.ValueString(), sum))
		return nil
	}
	m.CodeSHA256 = types.StringValue(sum)
	return zip
}

// deploy uploads zip (when not nil) as fn's code, waits until the server
// settled fn's latest generation and sets m from the outcome. A failed
// upload, wait or build is an error in diags.
func (r *functionResource) deploy(ctx context.Context, m *functionModel, fn *functions.Function, zip []byte, diags *diag.Diagnostics) {
	c := r.data.client
	what := "function " + id(fn.Namespace, fn.Name)
	if zip != nil {
		up, err := c.UploadCode(ctx, fn.Namespace, fn.Name, zip)
		if err != nil {
			apiError(diags, "upload the code of "+what, err)
			r.refresh(ctx, m, fn, diags)
			return
		}
		fn = up
	}
	settled, err := r.waitSettled(ctx, fn, m)
	if err != nil {
		diags.AddError("sless: "+what+" is not Ready", err.Error())
		r.refresh(ctx, m, fn, diags)
		return
	}
	m.fromAPI(settled, c)
	if settled.Status.Phase == functions.PhaseFailed {
		diags.AddError("sless: the build of "+what+" failed", buildFailure(settled))
	}
}

// refresh sets m from the server's function after a failure, falling back
// to fn when even that read fails.
func (r *functionResource) refresh(ctx context.Context, m *functionModel, fn *functions.Function, diags *diag.Diagnostics) {
	if now, err := r.data.client.GetFunction(ctx, fn.Namespace, fn.Name); err == nil {
		fn = now
	}
	m.fromAPI(fn, r.data.client)
}

// buildFailure describes a failed build: the server's message and the end
// of the build log.
func buildFailure(fn *functions.Function) string {
	var b strings.Builder
	b.WriteString(fn.Status.Message)
	if log := fn.Status.BuildLog; log != "" {
		if len(log) > maxBuildLogInDiagnostic {
			log = "...\n" + log[len(log)-maxBuildLogInDiagnostic:]
		}
		b.WriteString("\n\nBuild log:\n")
		b.WriteString(log)
	}
	return b.String()
}

// waitSettled waits until the server settled fn's generation (Ready or
// Failed): up to wait_timeout_sec outside a build, and up to
// build_timeout_sec from when a build was seen starting.
func (r *functionResource) waitSettled(ctx context.Context, fn *functions.Function, m *functionModel) (*functions.Function, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	waitFor := time.Duration(m.WaitTimeoutSec.ValueInt64()) * time.Second
	buildFor := time.Duration(m.BuildTimeoutSec.ValueInt64()) * time.Second
	timer := time.AfterFunc(waitFor, func() {
		cancel(fmt.Errorf("the server did not take up the change within wait_timeout_sec (%v)", waitFor))
	})
	defer func() { timer.Stop() }()
	building := false
	return r.data.client.WaitSettled(ctx, fn.Namespace, fn.Name, fn.Generation, func(now *functions.Function) {
		if now.Status.Phase == functions.PhaseBuilding && !building {
			building = true
			timer.Stop()
			timer = time.AfterFunc(buildFor, func() {
				cancel(fmt.Errorf("the build did not finish within build_timeout_sec (%v)", buildFor))
			})
		}
	})
}

func (r *functionResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state functionModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	fn, err := r.data.client.GetFunction(ctx, state.Namespace.ValueString(), state.Name.ValueString())
	if client.IsNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		apiError(&resp.Diagnostics, "read function "+state.ID.ValueString(), err)
		return
	}
	state.fromAPI(fn, r.data.client)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *functionResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state functionModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c := r.data.client
	ns, name := plan.Namespace.ValueString(), plan.Name.ValueString()
	want := plan.function()
	fn, err := c.GetFunction(ctx, ns, name)
	if err != nil {
		apiError(&resp.Diagnostics, "read function "+id(ns, name), err)
		return
	}
	changed := false
	if !sameSpec(&want.Spec, &fn.Spec) {
		if fn, err = c.UpdateFunction(ctx, want); err != nil {
			apiError(&resp.Diagnostics, "update function "+id(ns, name), err)
			return
		}
		changed = true
	}
	var zip []byte
	// New code, or code whose build failed: uploading it again builds it
	// again.
	if plan.CodeSHA256.ValueString() != state.CodeSHA256.ValueString() || state.Phase.ValueString() != string(functions.PhaseReady) {
		if zip = plan.checkedCode(&resp.Diagnostics); zip == nil {
			return
		}
		changed = true
	}
	if !changed {
		plan.fromAPI(fn, c)
		resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
		return
	}
	r.deploy(ctx, &plan, fn, zip, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *functionResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state functionModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	_, err := r.data.client.DeleteFunction(ctx, state.Namespace.ValueString(), state.Name.ValueString())
	if err != nil && !client.IsNotFound(err) {
		apiError(&resp.Diagnostics, "delete function "+state.ID.ValueString(), err)
	}
}

func (r *functionResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importID(ctx, "function", req, resp)
}
