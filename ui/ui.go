// Package ui serves the web console at /ui: static files embedded in the
// binary (HTML, CSS and JavaScript modules, no framework and nothing
// fetched from elsewhere), which sign in with an API token and do
// everything through the REST API, as any client of it would.
//
// /ui serves only these files, with a Content-Security-Policy that lets the
// page load and call nothing but its own origin; the token stays in the
// browser's sessionStorage and is sent only as the Authorization header of
// the API's requests, never in a URL.
package ui

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/gin-gonic/gin"
)

//go:embed static
var static embed.FS

// Path is where the console is served.
const Path = "/ui/"

// securityHeaders are set on every answer under /ui.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Content-Type-Options": "nosniff",
	"X-Frame-Options":        "DENY",
	"Referrer-Policy":        "no-referrer",
	// The files change with the binary; revalidate rather than run an old
	// console against a new API.
	"Cache-Control": "no-cache",
}

// Console serves the console; it implements httpx.Routes.
type Console struct {
	files http.Handler
}

// New returns the console.
func New() *Console {
	sub, _ := fs.Sub(static, "static") // static is a literal directory of the embed
	return &Console{files: http.StripPrefix(Path, http.FileServerFS(sub))}
}

// Register implements httpx.Routes: GET and HEAD of /ui/ and the files
// below it; / and /ui go to /ui/.
func (c *Console) Register(_ *gin.RouterGroup, root *gin.Engine) {
	to := func(g *gin.Context) { g.Redirect(http.StatusFound, Path) }
	root.GET("/", to)
	root.GET("/ui", to)
	serve := func(g *gin.Context) {
		for k, v := range securityHeaders {
			g.Header(k, v)
		}
		c.files.ServeHTTP(g.Writer, g.Request)
	}
	root.GET(Path+"*file", serve)
	root.HEAD(Path+"*file", serve)
}
