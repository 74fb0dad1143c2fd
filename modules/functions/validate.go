package functions

import (
	"maps"
	"regexp"
	"slices"
	"strings"

	"sless.kube5s.ru/sless/internal/validation"
	"sless.kube5s.ru/sless/modules/runtime"
)

// Defaults and limits of Spec fields.
const (
	DefaultTimeoutSeconds = 30
	MaxTimeoutSeconds     = 900
	DefaultMemoryMB       = 256
	MinMemoryMB           = 32
	MaxMemoryMB           = 16384
	DefaultMaxInstances   = 10
	MaxInstancesLimit     = 100
	DefaultConcurrency    = 1
	MaxConcurrency        = 1000
	// MaxEnvBytes caps the sum of the lengths of env names and values.
	MaxEnvBytes = 64 << 10
	// MaxEnvVars caps the number of env variables.
	MaxEnvVars = 256
	// MaxEnvNameBytes caps the length of one env variable's name.
	MaxEnvNameBytes = 256
	// MaxHandlerBytes caps the handler ("<file>.<function>").
	MaxHandlerBytes = 256
	// MaxRuntimeBytes caps the runtime name, as runtime.Provider does.
	MaxRuntimeBytes = 32
	// MaxEgressBytes caps an egress value quoted in an error.
	MaxEgressBytes = 16
)

// ReservedEnvPrefix starts the names of variables that the platform sets.
const ReservedEnvPrefix = "SLESS_"

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Runtimes looks up runtime providers; *runtime.Registry implements it.
type Runtimes interface {
	Get(name string) (runtime.Provider, error)
}

// ApplyDefaults fills the zero fields of spec that have defaults. The
// handler default comes from the runtime, so an unknown runtime leaves it
// empty (Validate reports the runtime).
func ApplyDefaults(spec *Spec, runtimes Runtimes) {
	if spec.Handler == "" {
		if p, err := runtimes.Get(spec.Runtime); err == nil {
			spec.Handler = p.DefaultHandler()
		}
	}
	if spec.TimeoutSeconds == 0 {
		spec.TimeoutSeconds = DefaultTimeoutSeconds
	}
	if spec.MemoryMB == 0 {
		spec.MemoryMB = DefaultMemoryMB
	}
	if spec.MaxInstances == 0 {
		spec.MaxInstances = max(DefaultMaxInstances, spec.MinInstances)
	}
	if spec.Concurrency == 0 {
		spec.Concurrency = DefaultConcurrency
	}
	if spec.Egress == "" {
		spec.Egress = string(runtime.EgressAll)
	}
}

// Validate checks a function's name, namespace and spec (after
// ApplyDefaults) and returns a *validation.Errors naming every bad field.
func Validate(fn *Function, runtimes Runtimes) error {
	errs := &validation.Errors{Resource: "function"}
	errs.Name("name", fn.Name)
	errs.Namespace("namespace", fn.Namespace)
	validateSpec(&fn.Spec, runtimes, errs)
	return errs.Err()
}

func validateSpec(spec *Spec, runtimes Runtimes, errs *validation.Errors) {
	// Values over their limits are not checked further: the messages of
	// those checks quote them.
	handlerOK := errs.MaxLen("handler", spec.Handler, MaxHandlerBytes)
	if spec.Runtime == "" {
		errs.Add("runtime", "is required")
	} else if errs.MaxLen("runtime", spec.Runtime, MaxRuntimeBytes) {
		if p, err := runtimes.Get(spec.Runtime); err != nil {
			errs.Add("runtime", "%v", err)
		} else if _, err := p.HandlerFiles(spec.Handler); err != nil && handlerOK {
			errs.Add("handler", "%v", err)
		}
	}
	errs.Range("timeout_seconds", spec.TimeoutSeconds, 1, MaxTimeoutSeconds)
	errs.Range("memory_mb", spec.MemoryMB, MinMemoryMB, MaxMemoryMB)
	errs.Range("max_instances", spec.MaxInstances, 1, MaxInstancesLimit)
	errs.Range("min_instances", spec.MinInstances, 0, spec.MaxInstances)
	errs.Range("concurrency", spec.Concurrency, 1, MaxConcurrency)
	if _, err := runtime.ParseEgress(spec.Egress); err != nil && errs.MaxLen("egress", spec.Egress, MaxEgressBytes) {
		errs.Add("egress", "must be %q or %q (got %q)", runtime.EgressAll, runtime.EgressPublic, spec.Egress)
	}
	validateEnv(spec.Env, errs)
}

func validateEnv(env map[string]string, errs *validation.Errors) {
	if len(env) > MaxEnvVars {
		errs.Add("env", "has %d variables; the limit is %d", len(env), MaxEnvVars)
	}
	total := 0
	for _, name := range slices.Sorted(maps.Keys(env)) {
		value := env[name]
		field := "env." + name
		total += len(name) + len(value)
		switch {
		case len(name) > MaxEnvNameBytes:
			// The field's path would quote the whole name.
			errs.Add("env", "a variable name is %d bytes; the limit is %d", len(name), MaxEnvNameBytes)
		case !envName.MatchString(name):
			errs.Add(field, "variable names must match %s", envName)
		case strings.HasPrefix(name, ReservedEnvPrefix):
			errs.Add(field, "names starting with %s are reserved for the platform", ReservedEnvPrefix)
		}
		if strings.ContainsRune(value, 0) {
			errs.Add(field, "value must not contain a NUL byte")
		}
	}
	if total > MaxEnvBytes {
		errs.Add("env", "names and values total %d bytes; the limit is %d", total, MaxEnvBytes)
	}
}
