// Package provider is the Terraform provider of sless, built on
// terraform-plugin-framework and the Go API client: the resources
// sless_function, sless_trigger and sless_job and the data sources
// sless_function and sless_invocations.
package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"sless.kube5s.ru/sless/client"
)

// Address is the provider's registry address.
const Address = "registry.terraform.io/naeel/sless"

// Defaults and bounds of the provider's settings.
const (
	defaultRequestTimeout = 60 * time.Second
	maxRequestTimeoutSec  = 3600
)

// New returns a constructor of the provider at version.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &slessProvider{version: version} }
}

type slessProvider struct{ version string }

type providerModel struct {
	Endpoint              types.String `tfsdk:"endpoint"`
	Token                 types.String `tfsdk:"token"`
	RequestTimeoutSeconds types.Int64  `tfsdk:"request_timeout_seconds"`
}

// providerData is what Configure hands to resources and data sources.
type providerData struct {
	client *client.Client
	// namespace is the token's own, from GET /v1/whoami: the default of
	// every resource's namespace.
	namespace string

	runtimesOnce sync.Once
	runtimes     map[string]client.Runtime
	runtimesErr  error
}

// runtime returns the server's runtime name, asking GET /v1/runtimes once;
// ok is false for a runtime the server does not know.
func (d *providerData) runtime(ctx context.Context, name string) (rt client.Runtime, known []string, ok bool, err error) {
	d.runtimesOnce.Do(func() {
		var items []client.Runtime
		items, d.runtimesErr = d.client.ListRuntimes(ctx)
		d.runtimes = map[string]client.Runtime{}
		for _, r := range items {
			d.runtimes[r.Name] = r
		}
	})
	if d.runtimesErr != nil {
		return client.Runtime{}, nil, false, d.runtimesErr
	}
	for n := range d.runtimes {
		known = append(known, n)
	}
	rt, ok = d.runtimes[name]
	return rt, known, ok, nil
}

func (p *slessProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "sless"
	resp.Version = p.version
}

func (p *slessProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Manages sless functions, triggers and jobs through the sless REST API.",
		Attributes: map[string]schema.Attribute{
			"endpoint": schema.StringAttribute{
				Optional: true,
				Description: "Base URL of the sless server (http://HOST:PORT, https://HOST, or HOST:PORT for http). " +
					"Default: SLESS_ENDPOINT; with neither, the server running from the local data directory (SLESS_DATA_DIR), as the CLI finds it.",
			},
			"token": schema.StringAttribute{
				Optional:  true,
				Sensitive: true,
				Description: "API token. Default: SLESS_TOKEN; with neither, the generated token of the local server " +
					"when the endpoint names it. The resources' namespace defaults to the token's own (GET /v1/whoami).",
			},
			"request_timeout_seconds": schema.Int64Attribute{
				Optional:    true,
				Description: fmt.Sprintf("Longest one API request may take, 1 to %d; default %d. Waits for builds, triggers and jobs have their own bounds.", maxRequestTimeoutSec, int(defaultRequestTimeout.Seconds())),
				Validators:  []validator.Int64{between(1, maxRequestTimeoutSec)},
			},
		},
	}
}

func (p *slessProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var cfg providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	for name, v := range map[string]interface{ IsUnknown() bool }{"endpoint": cfg.Endpoint, "token": cfg.Token, "request_timeout_seconds": cfg.RequestTimeoutSeconds} {
		if v.IsUnknown() {
			resp.Diagnostics.AddAttributeError(path.Root(name), "Unknown provider setting",
				"The sless provider's "+name+" depends on a value known only after apply; set it to a value known at plan time.")
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}
	endpoint, token := cfg.Endpoint.ValueString(), cfg.Token.ValueString()
	if endpoint == "" {
		endpoint = os.Getenv("SLESS_ENDPOINT")
	}
	if token == "" {
		token = os.Getenv("SLESS_TOKEN")
	}
	c, err := client.Resolve(endpoint, token)
	if err != nil {
		resp.Diagnostics.AddError("Cannot configure the sless provider",
			err.Error()+"\n\nThe provider takes endpoint and token from its settings, else from SLESS_ENDPOINT and SLESS_TOKEN.")
		return
	}
	timeout := defaultRequestTimeout
	if !cfg.RequestTimeoutSeconds.IsNull() {
		timeout = time.Duration(cfg.RequestTimeoutSeconds.ValueInt64()) * time.Second
	}
	c.HTTP = &http.Client{Timeout: timeout}
	ns, err := c.Whoami(ctx)
	if err != nil {
		resp.Diagnostics.Append(connectError(c.Endpoint, err))
		return
	}
	data := &providerData{client: c, namespace: ns}
	resp.ResourceData = data
	resp.DataSourceData = data
}

// connectError is the one diagnostic of a failed GET /v1/whoami.
func connectError(endpoint string, err error) diag.Diagnostic {
	var ae *client.APIError
	if errors.As(err, &ae) && (ae.StatusCode == http.StatusUnauthorized || ae.StatusCode == http.StatusForbidden) {
		return diag.NewErrorDiagnostic("The sless server refused the API token",
			fmt.Sprintf("The server at %s refused the provider's token: %s.\n\nSet the provider's token (or SLESS_TOKEN) to a token of that server.", endpoint, ae.Message))
	}
	return diag.NewErrorDiagnostic("Cannot reach the sless server",
		fmt.Sprintf("Checking the token with GET %s/v1/whoami failed: %v", endpoint, err))
}

func (p *slessProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{newFunctionResource, newTriggerResource, newJobResource}
}

func (p *slessProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{newFunctionDataSource, newInvocationsDataSource}
}

// dataFrom returns the provider's data handed to a resource or data source,
// or nil before the provider is configured (validation, import of the
// schema).
func dataFrom(pd any, diags *diag.Diagnostics) *providerData {
	if pd == nil {
		return nil
	}
	d, ok := pd.(*providerData)
	if !ok {
		diags.AddError("Unexpected provider data", fmt.Sprintf("got %T; this is a bug in the sless provider", pd))
	}
	return d
}
