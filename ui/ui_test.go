package ui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
)

func serve(t *testing.T, method, path string) *http.Response {
	t.Helper()
	gin.SetMode(gin.TestMode)
	e := gin.New()
	New().Register(e.Group("/v1"), e)
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w.Result()
}

func TestServesTheConsoleWithItsPolicy(t *testing.T) {
	for _, c := range []struct {
		path, contentType, contains string
	}{
		{"/ui/", "text/html; charset=utf-8", `<script type="module" src="js/app.js">`},
		{"/ui/js/app.js", "text/javascript; charset=utf-8", "import"},
		{"/ui/app.css", "text/css; charset=utf-8", "body"},
	} {
		resp := serve(t, "GET", c.path)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != c.contentType || !strings.Contains(string(body), c.contains) {
			t.Errorf("GET %s: %d %q, want 200 %q with %q", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), c.contentType, c.contains)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'self';") || strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: Content-Security-Policy %q, want default-src 'self' and nothing unsafe", c.path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: headers %v, want nosniff and DENY", c.path, resp.Header)
		}
	}
	for _, path := range []string{"/", "/ui"} {
		if resp := serve(t, "GET", path); resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
			t.Errorf("GET %s: %d to %q, want 302 to /ui/", path, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	if resp := serve(t, "GET", "/ui/nope.js"); resp.StatusCode != 404 {
		t.Errorf("GET /ui/nope.js: %d, want 404", resp.StatusCode)
	}
}

// TestLoadsNothingFromElsewhere: the console works offline and under its
// policy: no file refers to another origin, and the HTML has no inline
// script or style, which the policy would block.
func TestLoadsNothingFromElsewhere(t *testing.T) {
	err := fsWalk(func(path string, data []byte) {
		s := string(data)
		for _, bad := range []string{"http://", "https://", "//cdn", "innerHTML", "eval(", "new Function"} {
			if strings.Contains(s, bad) {
				t.Errorf("%s contains %q", path, bad)
			}
		}
		if strings.HasSuffix(path, ".html") && (strings.Contains(s, "<script>") || strings.Contains(s, "style=") || strings.Contains(s, "<style")) {
			t.Errorf("%s has an inline script or style", path)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}
