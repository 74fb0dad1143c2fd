package openapi

import (
	"net/http"
	"reflect"

	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/auth"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/invoke"
	"sless.kube5s.ru/sless/modules/runtime/rtapi"
	"sless.kube5s.ru/sless/modules/server"
	"sless.kube5s.ru/sless/modules/server/httpx"
	"sless.kube5s.ru/sless/modules/triggers"
)

const apiDescription = `The REST API of sless, a serverless functions platform. Everything under /v1 takes
an API token as "Authorization: Bearer <token>" (but this document, /v1/openapi.json); /fn serves
the functions themselves. A token made for a namespace sees and changes only that namespace: any
other {ns} is answered 403.

Errors are JSON objects {"error": "<message a user can act on>"} with a 4xx or 5xx status; a
request whose fields are invalid also lists them in "fields". Lists are paged: ?limit= (1 to
500, default 50) sets the page size, and while more items follow the answer carries "continue",
which ?continue= takes to get the next page.`

var tags = []any{
	object{"name": "functions", "description": "Functions: their spec, code and status."},
	object{"name": "invocations", "description": "The invocation ledger: every run of every function, newest first."},
	object{"name": "triggers", "description": "http, cron and rabbitmq triggers of functions."},
	object{"name": "jobs", "description": "Function jobs: one run per run_id."},
	object{"name": "invoke", "description": "Calling functions."},
	object{"name": "server", "description": "The server: health, identity, runtimes, metrics, this document."},
	object{"name": "tokens", "description": "API tokens for tenants, managed by an admin token."},
}

// schemaNames names the components of the types whose Go names would be
// unclear or shared.
var schemaNames = map[reflect.Type]string{
	reflect.TypeFor[httpx.ErrorBody]():                          "Error",
	reflect.TypeFor[functions.Status]():                         "FunctionStatus",
	reflect.TypeFor[triggers.Status]():                          "TriggerStatus",
	reflect.TypeFor[invoke.Record]():                            "Invocation",
	reflect.TypeFor[httpx.ListResponse[*functions.Function]]():  "FunctionList",
	reflect.TypeFor[httpx.ListResponse[*triggers.Trigger]]():    "TriggerList",
	reflect.TypeFor[httpx.ListResponse[*triggers.Job]]():        "JobList",
	reflect.TypeFor[httpx.ListResponse[*invoke.Record]]():       "InvocationList",
	reflect.TypeFor[httpx.ListResponse[*auth.Token]]():          "TokenList",
	reflect.TypeFor[httpx.ListResponse[rtapi.Runtime]]():        "RuntimeList",
	reflect.TypeFor[httpx.ListResponse[invoke.FunctionStats]](): "FunctionStatsList",
	reflect.TypeFor[validation.FieldError]():                    "FieldError",
	reflect.TypeFor[functions.Deletion]():                       "FunctionDeletion",
	reflect.TypeFor[auth.NewToken]():                            "NewToken",
	reflect.TypeFor[auth.TokenRequest]():                        "TokenRequest",
	reflect.TypeFor[server.Whoami]():                            "Whoami",
	reflect.TypeFor[functions.Condition]():                      "Condition",
	reflect.TypeFor[triggers.JobStatus]():                       "JobStatus",
	reflect.TypeFor[rtapi.Runtime]():                            "Runtime",
	reflect.TypeFor[invoke.FunctionStats]():                     "FunctionStats",
}

// enums are the values of string types that have a fixed set.
var enums = map[reflect.Type][]string{
	reflect.TypeFor[functions.Phase]():           {"Pending", "Building", "Ready", "Failed"},
	reflect.TypeFor[functions.ConditionStatus](): {"True", "False", "Unknown"},
}

// fieldEnums are the values of string fields that have a fixed set, by
// fieldKey. A trigger's or job's phase is empty until its reconciler has
// seen it.
var fieldEnums = map[string][]string{
	"triggers.Spec.type":                   {triggers.TypeHTTP, triggers.TypeCron, triggers.TypeRabbitMQ},
	"triggers.HTTPSpec.auth":               {triggers.AuthNone, triggers.AuthToken},
	"triggers.CronSpec.concurrency_policy": {triggers.PolicyAllow, triggers.PolicyForbid, triggers.PolicyReplace},
	"triggers.Status.phase":                {"", triggers.PhaseActive, triggers.PhaseDisabled, triggers.PhaseError},
	"triggers.JobStatus.phase":             {"", triggers.JobPending, triggers.JobRunning, triggers.JobSucceeded, triggers.JobFailed},
	"invoke.Record.trigger_kind":           {invoke.KindHTTP, invoke.KindCron, invoke.KindRabbitMQ, invoke.KindJob, invoke.KindCLI},
	"functions.Spec.egress":                {"all", "public"},
}

// readOnlyFields are set by the server, by fieldKey.
var readOnlyFields = map[string]bool{
	"functions.Function.code_sha256": true, "functions.Function.generation": true,
	"functions.Function.created_at": true, "functions.Function.updated_at": true, "functions.Function.status": true,
	"triggers.Trigger.generation": true, "triggers.Trigger.created_at": true,
	"triggers.Trigger.updated_at": true, "triggers.Trigger.status": true,
	"triggers.Job.generation": true, "triggers.Job.created_at": true,
	"triggers.Job.updated_at": true, "triggers.Job.status": true,
}

var pathParameters = map[string]string{
	"ns":   "A namespace: lower-case letters, digits and '-', at most 63 characters.",
	"name": "The object's name, in its namespace.",
	"id":   "An id, as the object's \"id\" field has it.",
	"path": "The path below the function, passed to it (may contain '/').",
}

type queryParameter struct {
	description string
	schema      object
}

var queryParameters = map[string]queryParameter{
	"limit": {"Page size: 1 to 500; default 50.",
		object{"type": "integer", "minimum": 1, "maximum": validation.MaxPageSize, "default": validation.DefaultPageSize}},
	"continue": {"The \"continue\" of the previous page: this page starts after it.", object{"type": "string"}},
	"status": {"Only invocations with this outcome: \"success\" (status below 400), \"error\" (400 and above) " +
		"or one status code such as \"504\".", object{"type": "string"}},
	"trigger_kind": {"Only invocations caused by this kind of trigger.",
		object{"type": "string", "enum": []any{invoke.KindHTTP, invoke.KindCron, invoke.KindRabbitMQ, invoke.KindJob, invoke.KindCLI}}},
	"trigger_name": {"Only invocations caused by the trigger or job of this name.", object{"type": "string"}},
	"function":     {"Only invocations of this function.", object{"type": "string"}},
}

var headers = map[string]string{
	"X-Sless-Invocation-Id": "The id of the invocation in the ledger (GET /v1/namespaces/{ns}/invocations/{id}).",
	"Server-Timing": "The phases of the invocation in milliseconds: queue (waiting for capacity), " +
		"cold (starting an instance; 0 when one was warm) and handler (the handler's own time), " +
		`as "queue;dur=0.012, cold;dur=0.000, handler;dur=1.234".`,
}

var errorResponses = map[int]string{
	http.StatusBadRequest:            "The request is invalid; the message (and \"fields\", for invalid fields) says why.",
	http.StatusUnauthorized:          "No API token, or one the server does not accept.",
	http.StatusForbidden:             "The token may not act in this namespace, or do this.",
	http.StatusNotFound:              "No such object.",
	http.StatusConflict:              "An object of this name exists.",
	http.StatusRequestEntityTooLarge: "The body exceeds the server's limit.",
	http.StatusUnsupportedMediaType:  "The body's Content-Type is not one this call takes.",
	http.StatusInternalServerError:   "An error of the server's; its log has the details.",
	http.StatusServiceUnavailable:    "The server cannot serve this now (see Retry-After), or the function is not ready.",
}

var (
	zipUpload = media{description: "The function's code as a zip, raw or as the multipart form field \"file\".",
		content: object{
			"application/zip":     object{"schema": object{"type": "string", "contentMediaType": "application/zip"}},
			"multipart/form-data": object{"schema": object{"type": "object", "properties": object{"file": object{"type": "string", "contentMediaType": "application/zip"}}, "required": []any{"file"}}},
		}}
	anyBody = media{description: "Passed to the function as it is; JSON becomes the handler's event.",
		content: object{"*/*": object{"schema": object{}}}}
	anyAnswer = media{description: "The function's own answer: its status, headers and body; an error of the platform's " +
		"(a timeout 504, a crash 502, capacity 503) is an Error object.",
		content: object{"*/*": object{"schema": object{}}}}
	metricsText = media{description: "Prometheus text exposition format (docs/observability.md lists the series).",
		content: object{"text/plain": object{"schema": object{"type": "string"}}}}
	documentJSON = media{description: "This document.",
		content: object{"application/json": object{"schema": object{"type": "object"}}}}
	health = media{description: "The server's state: {\"status\": \"ok\"}, or \"unavailable\" with the failed checks.",
		content: object{"application/json": object{"schema": object{"type": "object"}}}}
)

// Operations are the routes of the default server (both modes serve the
// same): every gin route under /v1 and /fn, and the health and metrics
// endpoints. Plugins that add routes are not in it.
var Operations = []Operation{
	{Method: "GET", Path: "/healthz", ID: "health", Tag: "server", Public: true, Summary: "Liveness: the process serves.",
		Status: 200, Result: health},
	{Method: "GET", Path: "/readyz", ID: "ready", Tag: "server", Public: true,
		Summary: "Readiness: the server's dependencies (the database) answer.", Status: 200, Result: health,
		Errors: []int{503}},
	{Method: "GET", Path: "/metrics", ID: "metrics", Tag: "server", Public: true,
		Summary: "Prometheus metrics of every namespace (no token: protect it at the network, or use the namespace's metrics).",
		Status:  200, Result: metricsText},
	{Method: "GET", Path: "/v1/openapi.json", ID: "openapi", Tag: "server", Public: true,
		Summary:     "This OpenAPI document.",
		Description: "Public, like the API's shape in the source: tools and the console read it before they have a token.",
		Status:      200, Result: documentJSON},
	{Method: "GET", Path: "/v1/whoami", ID: "whoami", Tag: "server", Summary: "What the caller's token may do.",
		Status: 200, Result: server.Whoami{}},
	{Method: "GET", Path: "/v1/runtimes", ID: "listRuntimes", Tag: "server", Summary: "The runtimes this server runs.",
		Status: 200, Result: httpx.ListResponse[rtapi.Runtime]{}},
	{Method: "GET", Path: "/v1/namespaces/:ns/metrics", ID: "namespaceMetrics", Tag: "server",
		Summary: "The metrics of one namespace: the series of /metrics labelled with it.", Status: 200, Result: metricsText},
	{Method: "GET", Path: "/v1/namespaces/:ns/stats", ID: "namespaceStats", Tag: "invocations",
		Summary: "Each function's invocations in the last hour: rate, errors, median and 99th percentile duration, cold starts.",
		Description: "Counted by the server that answers, in memory, as the invocations end (in the cluster mode each replica " +
			"counts those it proxied); functions without invocations in the hour are left out.",
		Status: 200, Result: httpx.ListResponse[invoke.FunctionStats]{}},

	{Method: "POST", Path: "/v1/namespaces/:ns/functions", ID: "createFunction", Tag: "functions",
		Summary: "Create a function; upload its code next.", Body: functions.Function{}, Status: 201, Result: functions.Function{},
		Errors: []int{409, 413}},
	{Method: "GET", Path: "/v1/namespaces/:ns/functions", ID: "listFunctions", Tag: "functions",
		Summary: "List the namespace's functions by name.", Query: []string{"limit", "continue"},
		Status: 200, Result: httpx.ListResponse[*functions.Function]{}},
	{Method: "GET", Path: "/v1/namespaces/:ns/functions/:name", ID: "getFunction", Tag: "functions",
		Summary: "A function's spec and status, with its build log.", Status: 200, Result: functions.Function{}, Errors: []int{404}},
	{Method: "PUT", Path: "/v1/namespaces/:ns/functions/:name", ID: "updateFunction", Tag: "functions",
		Summary:     "Replace a function's spec.",
		Description: "Fields left out take their defaults, also when they had another value before.",
		Body:        functions.Function{}, Status: 200, Result: functions.Function{}, Errors: []int{404, 413}},
	{Method: "DELETE", Path: "/v1/namespaces/:ns/functions/:name", ID: "deleteFunction", Tag: "functions",
		Summary: "Delete a function with its triggers and jobs.", Status: 200, Result: functions.Deletion{}, Errors: []int{404}},
	{Method: "POST", Path: "/v1/namespaces/:ns/functions/:name/upload", ID: "uploadCode", Tag: "functions",
		Summary:     "Upload a function's code; the build starts.",
		Description: "The zip is checked (entries, sizes, the handler's file) before it is kept; the phase turns Building, then Ready or Failed.",
		Body:        zipUpload, Status: 202, Result: functions.Function{}, Errors: []int{404, 413, 415}},
	{Method: "POST", Path: "/v1/namespaces/:ns/functions/:name/invoke", ID: "invokeFunction", Tag: "invoke",
		Summary:     "Invoke a function with the API token, whether or not an http trigger exposes it.",
		Description: "Recorded with trigger_kind cli. The function does not see the Authorization header.",
		Body:        anyBody, Status: 200, Result: anyAnswer, ResultHeaders: []string{"X-Sless-Invocation-Id", "Server-Timing"},
		Errors: []int{404, 413, 503}},
	{Method: "ANY", Path: "/fn/:ns/:name", ID: "fn", Tag: "invoke", Public: true,
		Summary: "Invoke a function that an enabled http trigger exposes (404 otherwise).",
		Description: "A trigger with auth \"token\" makes the function private: callers then need a token of its namespace or an " +
			"invoker token of the function, as a bearer token.",
		Body: anyBody, Status: 200, Result: anyAnswer, ResultHeaders: []string{"X-Sless-Invocation-Id", "Server-Timing"},
		Errors: []int{401, 403, 404, 413, 503}},
	{Method: "ANY", Path: "/fn/:ns/:name/*path", ID: "fnPath", Tag: "invoke", Public: true,
		Summary: "Invoke a function at a path below it; the handler's context has the path.",
		Body:    anyBody, Status: 200, Result: anyAnswer, ResultHeaders: []string{"X-Sless-Invocation-Id", "Server-Timing"},
		Errors: []int{401, 403, 404, 413, 503}},

	{Method: "GET", Path: "/v1/namespaces/:ns/functions/:name/invocations", ID: "listFunctionInvocations", Tag: "invocations",
		Summary: "A function's invocations, newest first, without their logs.",
		Query:   []string{"limit", "continue", "status", "trigger_kind", "trigger_name"},
		Status:  200, Result: httpx.ListResponse[*invoke.Record]{}},
	{Method: "GET", Path: "/v1/namespaces/:ns/invocations", ID: "listInvocations", Tag: "invocations",
		Summary: "The namespace's invocations, newest first, without their logs.",
		Query:   []string{"limit", "continue", "status", "trigger_kind", "trigger_name", "function"},
		Status:  200, Result: httpx.ListResponse[*invoke.Record]{}},
	{Method: "GET", Path: "/v1/namespaces/:ns/invocations/:id", ID: "getInvocation", Tag: "invocations",
		Summary: "One invocation with the logs its handler printed.", Status: 200, Result: invoke.Record{}, Errors: []int{404}},

	{Method: "POST", Path: "/v1/namespaces/:ns/triggers", ID: "createTrigger", Tag: "triggers", Summary: "Create a trigger.",
		Body: triggers.Trigger{}, Status: 201, Result: triggers.Trigger{}, Errors: []int{409, 413}},
	{Method: "GET", Path: "/v1/namespaces/:ns/triggers", ID: "listTriggers", Tag: "triggers",
		Summary: "List the namespace's triggers by name (a broker URL's password shows as ***).", Query: []string{"limit", "continue"},
		Status: 200, Result: httpx.ListResponse[*triggers.Trigger]{}},
	{Method: "GET", Path: "/v1/namespaces/:ns/triggers/:name", ID: "getTrigger", Tag: "triggers", Summary: "A trigger and its status.",
		Status: 200, Result: triggers.Trigger{}, Errors: []int{404}},
	{Method: "PUT", Path: "/v1/namespaces/:ns/triggers/:name", ID: "updateTrigger", Tag: "triggers",
		Summary:     "Replace a trigger's spec; \"enabled\": false disables it in place.",
		Description: "A URL sent back as read (with ***) keeps the stored password.",
		Body:        triggers.Trigger{}, Status: 200, Result: triggers.Trigger{}, Errors: []int{404, 413}},
	{Method: "DELETE", Path: "/v1/namespaces/:ns/triggers/:name", ID: "deleteTrigger", Tag: "triggers", Summary: "Delete a trigger.",
		Status: 204, Errors: []int{404}},
	{Method: "GET", Path: "/v1/namespaces/:ns/triggers/:name/invocations", ID: "listTriggerInvocations", Tag: "triggers",
		Summary: "The invocations a trigger caused, newest first (an http trigger's: its function's from /fn).",
		Query:   []string{"limit", "continue", "status"}, Status: 200, Result: httpx.ListResponse[*invoke.Record]{}, Errors: []int{404}},

	{Method: "POST", Path: "/v1/namespaces/:ns/jobs", ID: "createJob", Tag: "jobs", Summary: "Create a job (it runs when run_id > 0).",
		Body: triggers.Job{}, Status: 201, Result: triggers.Job{}, Errors: []int{409, 413}},
	{Method: "GET", Path: "/v1/namespaces/:ns/jobs", ID: "listJobs", Tag: "jobs", Summary: "List the namespace's jobs by name.",
		Query: []string{"limit", "continue"}, Status: 200, Result: httpx.ListResponse[*triggers.Job]{}},
	{Method: "GET", Path: "/v1/namespaces/:ns/jobs/:name", ID: "getJob", Tag: "jobs", Summary: "A job and its last run.",
		Status: 200, Result: triggers.Job{}, Errors: []int{404}},
	{Method: "PUT", Path: "/v1/namespaces/:ns/jobs/:name", ID: "updateJob", Tag: "jobs",
		Summary: "Replace a job's spec; a higher run_id runs it once more.", Body: triggers.Job{}, Status: 200, Result: triggers.Job{},
		Errors: []int{404, 413}},
	{Method: "DELETE", Path: "/v1/namespaces/:ns/jobs/:name", ID: "deleteJob", Tag: "jobs", Summary: "Delete a job.",
		Status: 204, Errors: []int{404}},
	{Method: "GET", Path: "/v1/namespaces/:ns/jobs/:name/invocations", ID: "listJobInvocations", Tag: "jobs",
		Summary: "A job's runs, newest first.", Query: []string{"limit", "continue", "status"},
		Status: 200, Result: httpx.ListResponse[*invoke.Record]{}, Errors: []int{404}},

	{Method: "POST", Path: "/v1/tokens", ID: "createToken", Tag: "tokens",
		Summary: "Make a token for a namespace (admin only); its secret is shown only in this answer.",
		Body:    auth.TokenRequest{}, Status: 201, Result: auth.NewToken{}, Errors: []int{400, 403, 413}},
	{Method: "GET", Path: "/v1/tokens", ID: "listTokens", Tag: "tokens", Summary: "List the tokens (admin only), without secrets.",
		Query: []string{"limit", "continue"}, Status: 200, Result: httpx.ListResponse[*auth.Token]{}, Errors: []int{400, 403}},
	{Method: "DELETE", Path: "/v1/tokens/:id", ID: "revokeToken", Tag: "tokens", Summary: "Revoke a token (admin only).",
		Status: 204, Errors: []int{403, 404}},
}
