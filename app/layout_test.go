package app

import (
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
)

// TestImplementationsArePickedInApp checks the rule that only app/ picks
// implementations: the builders, executors and blob stores are imported by
// app/ alone (and by the implementation that they are a part of), and the
// stores and reconciler drivers of the embedded mode by the fx option that
// offers them to app/ alone, so that every other package reaches them
// through their contracts; the /fn proxy, for one, does not know the local
// executor's protocol. bench measures builders as tests do, and the CLI
// runs the crane builder for `sless image build`.
func TestImplementationsArePickedInApp(t *testing.T) {
	const mod = "sless.kube5s.ru/sless/"
	allowed := map[string][]string{
		"modules/build/local":   {"app", "bench"},
		"modules/build/crane":   {"app", "cli", "bench"},
		"modules/runtime/local": {"app"},
		"modules/runtime/kube":  {"app"},
		// The cluster mode's drivers of the reconcilers, which link
		// controller-runtime: only app/cluster.go picks them.
		"modules/reconciler/crdriver":    {"app", "modules/functions/fncontroller", "modules/triggers/trcontroller"},
		"modules/functions/fncontroller": {"app"},
		"modules/triggers/trcontroller":  {"app"},
		"modules/runtime/wire":           {"modules/runtime/local"},
		"modules/runtime/sandbox":        {"app", "modules/runtime/local", "cmd/sless"}, // cmd/sless runs sandbox.Init
		"modules/storage/blobfs":         {"app", "bench"},
		"modules/storage/blobs3":         {"app"},
		// Offered to app/ as functionsfx.SQLStore, triggersfx.SQLStore,
		// invokefx.SQLLedger and the WorkQueue drivers.
		"modules/functions/fnstore": {"modules/functions/functionsfx"},
		"modules/triggers/trstore":  {"modules/triggers/triggersfx"},
		"modules/invoke/ledger":     {"modules/invoke/invokefx"},
		"internal/controller":       {"modules/functions/functionsfx", "modules/triggers/triggersfx"},
		"modules/triggers/control":  {"modules/triggers/triggersfx", "modules/triggers/trcontroller"},
		// The cluster mode's stores, and what they share.
		"modules/functions/crstore": {"app", "modules/functions/fncontroller"},
		"modules/triggers/crstore":  {"app", "modules/triggers/trcontroller"},
		"internal/kubestore":        {"modules/functions/crstore", "modules/triggers/crstore"},
	}
	gobin := filepath.Join(goruntime.GOROOT(), "bin", "go")
	cmd := exec.Command(gobin, "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, mod+"...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], mod)
		for _, imp := range fields[1:] {
			who, ok := allowed[strings.TrimPrefix(imp, mod)]
			if ok && !slices.Contains(who, pkg) {
				t.Errorf("%s imports the implementation %s; reach it through its contract, chosen in app/", pkg, imp)
			}
		}
	}
}

// TestBinaryLinksNoKubernetesClient keeps the Kubernetes client libraries
// out of the sless binary: their package init (client-go's scheme, which
// controller-runtime's client registers at init) doubles the CPU of every
// start of the binary, and every instance of the embedded mode starts it
// as its sandbox's init. See docs/architecture.md.
func TestBinaryLinksNoKubernetesClient(t *testing.T) {
	gobin := filepath.Join(goruntime.GOROOT(), "bin", "go")
	cmd := exec.Command(gobin, "list", "-deps", "sless.kube5s.ru/sless/cmd/sless")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for pkg := range strings.Lines(string(out)) {
		pkg = strings.TrimSpace(pkg)
		for _, heavy := range []string{"sigs.k8s.io/controller-runtime/", "k8s.io/client-go/kubernetes", "k8s.io/api/"} {
			if strings.HasPrefix(pkg, heavy) {
				t.Errorf("cmd/sless links %s: the Kubernetes client libraries would make every start of the binary, and so every instance's sandbox-init, cost twice the CPU", pkg)
			}
		}
	}
}
