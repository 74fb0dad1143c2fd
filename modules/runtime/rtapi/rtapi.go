// Package rtapi serves GET /v1/runtimes: the runtimes this server knows.
package rtapi

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"sless.kube5s.ru/sless/modules/runtime"
	"sless.kube5s.ru/sless/modules/server/httpx"
)

// Runtime describes one registered runtime.
type Runtime struct {
	Name           string `json:"name"`
	DefaultHandler string `json:"default_handler"`
	// DependencyFile is the manifest whose dependencies builds install, if any.
	DependencyFile string `json:"dependency_file,omitempty"`
	BaseImage      string `json:"base_image"`
}

// API is the runtimes REST API.
type API struct {
	items []Runtime
}

// New describes the registry's runtimes once; the registry never changes.
func New(reg *runtime.Registry) *API {
	a := &API{items: []Runtime{}}
	for _, name := range reg.Names() {
		p, _ := reg.Get(name)
		rt := Runtime{Name: name, DefaultHandler: p.DefaultHandler(), BaseImage: p.BaseImage()}
		if inst, ok := p.(runtime.DependencyInstaller); ok {
			rt.DependencyFile = inst.DependencyFile()
		}
		a.items = append(a.items, rt)
	}
	return a
}

// Register implements httpx.Routes.
func (a *API) Register(v1 *gin.RouterGroup, _ *gin.Engine) {
	v1.GET("/runtimes", func(c *gin.Context) { c.JSON(http.StatusOK, httpx.ListResponse[Runtime]{Items: a.items}) })
}
