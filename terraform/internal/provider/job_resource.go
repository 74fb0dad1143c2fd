package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"sless.kube5s.ru/sless/client"
	"sless.kube5s.ru/sless/modules/triggers"
)

const defaultJobWaitSec = 300

func newJobResource() resource.Resource { return &jobResource{} }

type jobResource struct{ data *providerData }

var (
	_ resource.ResourceWithConfigure   = (*jobResource)(nil)
	_ resource.ResourceWithModifyPlan  = (*jobResource)(nil)
	_ resource.ResourceWithImportState = (*jobResource)(nil)
)

type jobModel struct {
	ID             types.String `tfsdk:"id"`
	Name           types.String `tfsdk:"name"`
	Namespace      types.String `tfsdk:"namespace"`
	Function       types.String `tfsdk:"function"`
	Payload        types.String `tfsdk:"payload"`
	RunID          types.Int64  `tfsdk:"run_id"`
	WaitTimeoutSec types.Int64  `tfsdk:"wait_timeout_sec"`
	Phase          types.String `tfsdk:"phase"`
	Result         types.String `tfsdk:"result"`
	StatusCode     types.Int64  `tfsdk:"status_code"`
	Error          types.String `tfsdk:"error"`
	InvocationID   types.String `tfsdk:"invocation_id"`
}

func (r *jobResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_job"
}

func (r *jobResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.data = dataFrom(req.ProviderData, &resp.Diagnostics)
}

func (r *jobResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A job: runs its function once for each new run_id, and apply waits for the run.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed: true, Description: "namespace/name.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"name": schema.StringAttribute{
				Required: true, Description: "The job's name; changing it replaces the job.",
				Validators:    []validator.String{isName()},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"namespace": schema.StringAttribute{
				Optional: true, Computed: true,
				Description: "The namespace; default: the provider token's own. Changing it replaces the job.",
				Validators:  []validator.String{isName()},
			},
			"function": schema.StringAttribute{
				Required: true, Description: "The function it runs, in the same namespace.",
				Validators: []validator.String{isName()},
			},
			"payload": schema.StringAttribute{
				Optional: true, Description: "The JSON event of the run, e.g. jsonencode({all = true}).",
				Validators: []validator.String{isJSON()},
			},
			"run_id": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(0),
				Description: "0 (default): do not run. Raising it runs the function once more; lowering it is an error.",
				Validators:  []validator.Int64{between(0, 1<<53)},
			},
			"wait_timeout_sec": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(defaultJobWaitSec),
				Description: fmt.Sprintf("Longest apply waits for a run, 1 to %d; default %d.", maxWaitSec, defaultJobWaitSec),
				Validators:  []validator.Int64{between(1, maxWaitSec)},
			},
			"phase":         schema.StringAttribute{Computed: true, Description: "Pending, Running, Succeeded or Failed: the run of the latest run_id."},
			"result":        schema.StringAttribute{Computed: true, Description: "The function's response body (up to 64 KiB)."},
			"status_code":   schema.Int64Attribute{Computed: true, Description: "The function's HTTP status."},
			"error":         schema.StringAttribute{Computed: true, Description: "Why the run failed."},
			"invocation_id": schema.StringAttribute{Computed: true, Description: "The run's invocation in the ledger."},
		},
	}
}

// ModifyPlan plans the namespace and refuses a lower run_id: the server never runs a run_id twice,
// so lowering it would plan a change that does nothing.
func (r *jobResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.data == nil {
		return
	}
	planNamespace(ctx, r.data, req, resp)
	if req.State.Raw.IsNull() {
		return
	}
	var plan, state jobModel
	resp.Diagnostics.Append(resp.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || plan.RunID.IsUnknown() {
		return
	}
	if p, s := plan.RunID.ValueInt64(), state.RunID.ValueInt64(); p < s {
		resp.Diagnostics.AddAttributeError(path.Root("run_id"), "run_id cannot be lowered",
			fmt.Sprintf("run_id is %d, below the job's %d: a run_id runs only once. Set it to %d to keep the job, or above to run it again.", p, s, s))
	}
}

func (m *jobModel) job() *triggers.Job {
	j := &triggers.Job{
		Name: m.Name.ValueString(), Namespace: m.Namespace.ValueString(),
		JobSpec: triggers.JobSpec{Function: m.Function.ValueString(), RunID: m.RunID.ValueInt64()},
	}
	if p := m.Payload.ValueString(); p != "" {
		j.Payload = json.RawMessage(p)
	}
	return j
}

func (m *jobModel) fromAPI(j *triggers.Job) {
	m.ID = types.StringValue(id(j.Namespace, j.Name))
	m.Name, m.Namespace, m.Function = types.StringValue(j.Name), types.StringValue(j.Namespace), types.StringValue(j.Function)
	if !sameJSON(m.Payload.ValueString(), string(j.Payload)) {
		m.Payload = stringOrNull(string(j.Payload))
	}
	m.RunID = types.Int64Value(j.RunID)
	if m.WaitTimeoutSec.IsNull() || m.WaitTimeoutSec.IsUnknown() {
		m.WaitTimeoutSec = types.Int64Value(defaultJobWaitSec)
	}
	m.Phase, m.Result = types.StringValue(j.Status.Phase), types.StringValue(j.Status.Result)
	m.StatusCode = types.Int64Value(int64(j.Status.StatusCode))
	m.Error, m.InvocationID = types.StringValue(j.Status.Error), types.StringValue(j.Status.InvocationID)
}

// run waits, when j's run_id is above prior, for that run and sets m from
// the job; a failed run is an error with the function's error.
func (r *jobResource) run(ctx context.Context, m *jobModel, j *triggers.Job, prior int64, diags *diag.Diagnostics) {
	what := fmt.Sprintf("run %d of job %s", j.RunID, id(j.Namespace, j.Name))
	if j.RunID > prior {
		ctx, cancel := context.WithTimeout(ctx, time.Duration(m.WaitTimeoutSec.ValueInt64())*time.Second)
		defer cancel()
		done, err := r.data.client.WaitJob(ctx, j.Namespace, j.Name, j.RunID)
		switch {
		case err != nil:
			diags.AddError("sless: the "+what+" did not finish", err.Error()+" (wait_timeout_sec)")
		case done.Status.Phase == triggers.JobFailed:
			detail := fmt.Sprintf("%s\n\nThe function answered HTTP %d", done.Status.Error, done.Status.StatusCode)
			if done.Status.Result != "" {
				detail += ": " + done.Status.Result
			}
			diags.AddError("sless: the "+what+" failed", detail+"\n\nInvocation "+done.Status.InvocationID+". Raise run_id to run it again.")
		}
		if done != nil {
			j = done
		}
	}
	m.fromAPI(j)
}

func (r *jobResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan jobModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	j, err := r.data.client.CreateJob(ctx, plan.job())
	if err != nil {
		apiError(&resp.Diagnostics, "create job "+id(plan.Namespace.ValueString(), plan.Name.ValueString()), err)
		return
	}
	r.run(ctx, &plan, j, 0, &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *jobResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state jobModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	j, err := r.data.client.GetJob(ctx, state.Namespace.ValueString(), state.Name.ValueString())
	if client.IsNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		apiError(&resp.Diagnostics, "read job "+state.ID.ValueString(), err)
		return
	}
	state.fromAPI(j)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

func (r *jobResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state jobModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	j, err := r.data.client.UpdateJob(ctx, plan.job())
	if err != nil {
		apiError(&resp.Diagnostics, "update job "+id(plan.Namespace.ValueString(), plan.Name.ValueString()), err)
		return
	}
	r.run(ctx, &plan, j, state.RunID.ValueInt64(), &resp.Diagnostics)
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

func (r *jobResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state jobModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := r.data.client.DeleteJob(ctx, state.Namespace.ValueString(), state.Name.ValueString()); err != nil && !client.IsNotFound(err) {
		apiError(&resp.Diagnostics, "delete job "+state.ID.ValueString(), err)
	}
}

func (r *jobResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	importID(ctx, "job", req, resp)
}
