// Package buildtest is the conformance suite of build.Builder: every builder
// runs it, so that the reconciler can rely on the same behaviour from each.
package buildtest

import (
	"archive/zip"
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/storage"
)

// Env is a started builder of the python3.11 runtime and the blob store it
// reads uploads from.
type Env struct {
	Builder build.Builder
	Blobs   storage.Blobs
}

// Run runs the suite against the builders newEnv returns, a new one for
// each case.
func Run(t *testing.T, newEnv func(t *testing.T) Env) {
	cases := []struct {
		name string
		run  func(t *testing.T, e Env)
	}{
		{"builds, then reuses the artifact", testReuse},
		{"a missing handler is the code's fault", func(t *testing.T, e Env) {
			err := failure(t, e, upload(t, e, map[string]string{"main.py": "x = 1\n"}))
			if !strings.Contains(err.Msg, `handler "handler.handle" needs handler.py`) {
				t.Errorf("message %q does not name the missing handler file", err.Msg)
			}
		}},
		{"an unsafe archive is the code's fault", func(t *testing.T, e Env) {
			err := failure(t, e, upload(t, e, map[string]string{"../evil.py": "x = 1\n"}))
			if !strings.Contains(err.Msg, "escapes the archive root") {
				t.Errorf("message %q does not say the entry escapes", err.Msg)
			}
		}},
		{"missing code is the user's to upload again", func(t *testing.T, e Env) {
			err := failure(t, e, request(strings.Repeat("0", 64)))
			if !strings.Contains(err.Msg, "upload it again") {
				t.Errorf("message %q does not ask for the code again", err.Msg)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newEnv(t)) })
	}
}

const hello = "def handle(event, context):\n    return 'hello'\n"

func testReuse(t *testing.T, e Env) {
	req := upload(t, e, map[string]string{"handler.py": hello})
	first := finish(t, e, req)
	if first.Err != nil || first.Result.Artifact == "" || first.Result.Reused {
		t.Fatalf("first build: %+v; want a new artifact", first)
	}
	// Reported builds are forgotten: asking again finds the artifact.
	again := finish(t, e, req)
	if again.Err != nil || again.Result.Artifact != first.Result.Artifact || !again.Result.Reused {
		t.Errorf("second build: %+v; want %s reused", again, first.Result.Artifact)
	}
	other := req
	other.Function = "other"
	if p := finish(t, e, other); p.Err != nil || p.Result.Artifact != first.Result.Artifact {
		t.Errorf("another function with the same code: %+v; want %s", p, first.Result.Artifact)
	}
}

// finish starts req's build and returns its end, told by the notification.
func finish(t *testing.T, e Env, req build.Request) build.Progress {
	t.Helper()
	done := make(chan struct{})
	p, err := e.Builder.Build(context.Background(), req, func() { close(done) })
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if p.Done {
		return p
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the build never notified its end")
	}
	p, err = e.Builder.Build(context.Background(), req, nil)
	if err != nil || !p.Done {
		t.Fatalf("Build after the notification = %+v, %v; want the end", p, err)
	}
	return p
}

// failure builds req and returns its *build.Error.
func failure(t *testing.T, e Env, req build.Request) *build.Error {
	t.Helper()
	p := finish(t, e, req)
	be, ok := build.AsError(p.Err)
	if !ok {
		t.Fatalf("build: %+v; want a failure of the code", p)
	}
	return be
}

func upload(t *testing.T, e Env, files map[string]string) build.Request {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, content := range files {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(content))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	blob, err := e.Blobs.Put(context.Background(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	return request(blob.SHA256)
}

func request(sha string) build.Request {
	return build.Request{Namespace: "default", Function: "f", Runtime: "python3.11", Handler: "handler.handle", CodeSHA256: sha}
}
