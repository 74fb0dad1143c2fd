package kubeenv

import (
	"bufio"
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.kube5s.ru/sless/api/v1alpha1"
	"sless.kube5s.ru/sless/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func TestStartServesTheCRDs(t *testing.T) {
	env := Start(t)
	if again := Start(t); again != env {
		t.Errorf("a second Start returned another server")
	}
	ctx := context.Background()
	ns := env.NamespacePrefix(t) + "a"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	fn := &v1alpha1.Function{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hello"},
		Spec: v1alpha1.FunctionSpec{Runtime: "python3.11"}}
	if err := env.Client.Create(ctx, fn); err != nil {
		t.Fatalf("creating a Function: %v", err)
	}
	var list v1alpha1.FunctionList
	if err := env.Client.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "hello" {
		t.Errorf("listed %d functions; want hello alone", len(list.Items))
	}
	for _, l := range []client.ObjectList{&v1alpha1.TriggerList{}, &v1alpha1.FunctionJobList{}} {
		if err := env.Client.List(ctx, l); err != nil {
			t.Errorf("listing %T: %v", l, err)
		}
	}
}

// TestMissingBinariesAreNamed checks that without the binaries the reason
// names the command that builds them.
func TestMissingBinariesAreNamed(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", t.TempDir())
	_, _, err := start(false)
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver") {
		t.Errorf("start with no binaries: %v; want an error naming kube-apiserver", err)
	}
}

// helperEnv makes the test binary run TestHelperLeaveServer for
// TestServerDiesWithTestBinary.
const helperEnv = "KUBEENV_TEST_LEAVE_SERVER"

// TestHelperLeaveServer starts the server, prints the addresses and the
// directories of kube-apiserver and etcd and exits without stopping them,
// as a crashing test binary would.
func TestHelperLeaveServer(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("a helper of TestServerDiesWithTestBinary")
	}
	env := Start(t)
	cp := &shared.srv.env.ControlPlane
	os.Stdout.WriteString("ADDR=" + env.Config.Host + "\nADDR=" + cp.Etcd.URL.String() + "\n")
	os.Stdout.WriteString("DIR=" + cp.APIServer.CertDir + "\nDIR=" + cp.Etcd.DataDir + "\n")
	os.Exit(0)
}

func TestServerDiesWithTestBinary(t *testing.T) {
	Start(t) // skips or fails as the helper would, before it runs
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv (util-linux) is missing: the server does not die with the test binary")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperLeaveServer$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "ADDR="); ok {
			addrs = append(addrs, a)
		}
		if dir, ok := strings.CutPrefix(sc.Text(), "DIR="); ok && dir != "" {
			// Stopping the servers would have removed them.
			t.Cleanup(func() { os.RemoveAll(dir) })
		}
	}
	cmd.Wait()
	if len(addrs) != 2 {
		t.Fatalf("the helper printed the addresses %q; want those of kube-apiserver and etcd", addrs)
	}
	for _, addr := range addrs {
		u, err := url.Parse(addr)
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, "the server at "+addr+" of the exited test binary to stop", func() bool {
			c, err := net.DialTimeout("tcp", u.Host, time.Second)
			if err != nil {
				return true
			}
			c.Close()
			return false
		})
	}
}
