package deploy

import (
	"bufio"
	"bytes"
	"go/version"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"sless.kube5s.ru/sless/internal/testenv"
	"sless.kube5s.ru/sless/modules/runtime/nodejs"
	"sless.kube5s.ru/sless/modules/runtime/python"
)

// stage is one FROM of a Dockerfile and its instructions, continuation
// lines joined.
type stage struct {
	image, name  string
	instructions []string
}

// parseDockerfile splits a Dockerfile into its stages. There is no
// container tool on the test machines, so the file is read, not built.
func parseDockerfile(t *testing.T, data []byte) []stage {
	t.Helper()
	var stages []stage
	var line string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(text, "\\"); ok {
			line += cont + " "
			continue
		}
		line += text
		fields := strings.Fields(line)
		if strings.EqualFold(fields[0], "FROM") {
			s := stage{image: fields[1]}
			if len(fields) == 4 && strings.EqualFold(fields[2], "AS") {
				s.name = fields[3]
			}
			stages = append(stages, s)
		} else if len(stages) == 0 {
			t.Fatalf("Dockerfile: %q before the first FROM", line)
		} else {
			stages[len(stages)-1].instructions = append(stages[len(stages)-1].instructions, line)
		}
		line = ""
	}
	return stages
}

// instruction returns the arguments of s's last instruction named name
// (its last one counts), or "".
func (s stage) instruction(name string) string {
	out := ""
	for _, in := range s.instructions {
		if n, args, _ := strings.Cut(in, " "); strings.EqualFold(n, name) {
			out = args
		}
	}
	return out
}

// TestDockerfile: deploy/Dockerfile builds the cluster build of cmd/sless
// (-tags cluster, static) with a Go at least go.mod's, on bases pinned by
// version; both images it can make run as a non-root user, the default one
// with the interpreters of the runtimes' versions.
func TestDockerfile(t *testing.T) {
	root := testenv.RepoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages := parseDockerfile(t, data)
	if len(stages) < 2 {
		t.Fatalf("%d stages; want a build and an image", len(stages))
	}
	named := map[string]stage{}
	for _, s := range stages {
		named[s.name] = s
		if _, ok := named[s.image]; ok || s.image == "scratch" {
			continue // a stage of the file, or nothing
		}
		if err := checkImage(s.image); err != nil {
			t.Errorf("FROM %s: %v", s.image, err)
		}
	}

	var build *stage
	for i, s := range stages {
		if run := s.instruction("RUN"); strings.Contains(run, "go build") {
			build = &stages[i]
			for _, want := range []string{"CGO_ENABLED=0", "-tags cluster", "./cmd/sless"} {
				if !strings.Contains(run, want) {
					t.Errorf("RUN %s: want %s", run, want)
				}
			}
		}
	}
	if build == nil {
		t.Fatal("no stage runs go build")
	}
	goVersion := regexp.MustCompile(`^golang:(\d+\.\d+(?:\.\d+)?)`).FindStringSubmatch(build.image)
	modVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(readFile(t, filepath.Join(root, "go.mod")))
	if goVersion == nil || modVersion == nil {
		t.Fatalf("the build's image %s or go.mod names no Go version", build.image)
	}
	if version.Compare("go"+goVersion[1], "go"+string(modVersion[1])) < 0 {
		t.Errorf("the build runs Go %s; go.mod needs %s", goVersion[1], modVersion[1])
	}

	images := []stage{stages[len(stages)-1]} // the default target
	if m, ok := named["minimal"]; ok {
		images = append(images, m)
	} else {
		t.Error("no stage named minimal")
	}
	for _, img := range images {
		user := img.instruction("USER")
		uid, err := strconv.Atoi(strings.Split(user, ":")[0])
		if err != nil || uid == 0 {
			t.Errorf("stage %s: USER %q; want a numeric non-root user (runAsNonRoot checks the image's user by number)", img.name, user)
		}
		if !strings.Contains(img.instruction("ENTRYPOINT"), "sless") {
			t.Errorf("stage %s: ENTRYPOINT %q; want the sless binary", img.name, img.instruction("ENTRYPOINT"))
		}
	}

	// The crane builder installs dependencies with the runtimes'
	// interpreters, which the default image must have in their versions.
	def := stages[len(stages)-1]
	bases := map[string]string{}
	for _, s := range stages {
		repo, tag, _ := strings.Cut(s.image, ":")
		bases[repo] = tag
	}
	_, pyVersion, _ := strings.Cut(python.New().Name(), "python")
	_, nodeVersion, _ := strings.Cut(nodejs.New().Name(), "nodejs")
	if !strings.HasPrefix(bases["python"], pyVersion+".") || def.image != "python:"+bases["python"] {
		t.Errorf("the default image is FROM %s; want python:%s.x", def.image, pyVersion)
	}
	if !strings.HasPrefix(bases["node"], nodeVersion+".") {
		t.Errorf("node:%s; want Node.js %s", bases["node"], nodeVersion)
	}
	copies := strings.Join(def.instructions, "\n")
	for _, want := range []string{"/usr/local/bin/node", "node_modules/npm", "/usr/local/bin/sless"} {
		if !strings.Contains(copies, want) {
			t.Errorf("the default image does not copy %s", want)
		}
	}
}

// TestCredentialsStayOut: the files of credentials that the overlays read
// are ignored by git and left out of the image's build context.
func TestCredentialsStayOut(t *testing.T) {
	root := testenv.RepoRoot(t)
	dockerignore := string(readFile(t, filepath.Join(root, ".dockerignore")))
	for _, c := range []struct{ overlay, path string }{
		{"production", "sless.env"},
		{"quickstart", "credentials"},
	} {
		gitignore := strings.Fields(string(readFile(t, filepath.Join(root, "deploy", c.overlay, ".gitignore"))))
		if !slicesContainsPrefix(gitignore, c.path) {
			t.Errorf("deploy/%s/.gitignore %q does not ignore %s", c.overlay, gitignore, c.path)
		}
		if !slicesContainsPrefix(strings.Fields(dockerignore), "deploy/"+c.overlay+"/"+c.path) {
			t.Errorf(".dockerignore does not leave out deploy/%s/%s", c.overlay, c.path)
		}
	}
}

// slicesContainsPrefix reports whether a line of lines is want, or want
// followed by a slash.
func slicesContainsPrefix(lines []string, want string) bool {
	for _, l := range lines {
		if l == want || l == want+"/" {
			return true
		}
	}
	return false
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
