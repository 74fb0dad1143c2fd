// Package fnapi serves the functions REST API under
// /v1/namespaces/{ns}/functions.
package fnapi

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"slices"

	"github.com/dustin/go-humanize"
	"github.com/gin-gonic/gin"

	"sless.kube5s.ru/sless/modules/build"
	"sless.kube5s.ru/sless/modules/build/safezip"
	"sless.kube5s.ru/sless/modules/functions"
	"sless.kube5s.ru/sless/modules/server/httpx"
	"sless.kube5s.ru/sless/modules/storage"
)

// API is the functions REST API.
type API struct {
	store      functions.Store
	runtimes   functions.Runtimes
	notifier   functions.ChangeNotifier
	dependents functions.Dependents
	blobs      storage.Blobs
	limits     safezip.Limits
	tempDir    string
	log        *slog.Logger
}

// New returns the API. Uploads are checked against limits and spooled in
// memory, or to files in tempDir when large; deleting a function deletes its dependents.
func New(store functions.Store, runtimes functions.Runtimes, notifier functions.ChangeNotifier, dependents functions.Dependents,
	blobs storage.Blobs, limits safezip.Limits, tempDir string, log *slog.Logger) *API {
	return &API{store: store, runtimes: runtimes, notifier: notifier, dependents: dependents,
		blobs: blobs, limits: limits, tempDir: tempDir, log: log}
}

// Register implements httpx.Routes.
func (a *API) Register(v1 *gin.RouterGroup, _ *gin.Engine) {
	g := v1.Group("/namespaces/:ns/functions")
	g.POST("", a.handle(a.create))
	g.GET("", a.handle(a.list))
	g.GET("/:name", a.handle(a.get))
	g.PUT("/:name", a.handle(a.update))
	g.DELETE("/:name", a.handle(a.delete))
	g.POST("/:name/upload", a.handle(a.upload))
}

func (a *API) handle(h httpx.HandlerFunc) gin.HandlerFunc { return httpx.Handle(a.log, h) }

func key(c *gin.Context) functions.Key {
	return functions.Key{Namespace: c.Param("ns"), Name: c.Param("name")}
}

func (a *API) create(c *gin.Context) error {
	var fn functions.Function
	if err := httpx.DecodeJSON(c, &fn); err != nil {
		return err
	}
	if err := httpx.BindNames(c, "function", &fn.Namespace, &fn.Name, false); err != nil {
		return err
	}
	// The code comes only from an upload into this function's namespace
	// (code_sha256 is read-only, like status): honouring a hash from the
	// body would run code uploaded in another namespace.
	fn.CodeSHA256 = ""
	functions.ApplyDefaults(&fn.Spec, a.runtimes)
	if err := functions.Validate(&fn, a.runtimes); err != nil {
		return err
	}
	created, err := a.store.Create(c, &fn)
	if errors.Is(err, functions.ErrAlreadyExists) {
		return httpx.Errorf(http.StatusConflict, "function %q already exists in namespace %q; use PUT to update it", fn.Name, fn.Namespace)
	}
	if err != nil {
		return err
	}
	a.notifier.Changed(created.Key())
	c.JSON(http.StatusCreated, created.Public())
	return nil
}

func (a *API) list(c *gin.Context) error {
	limit, err := httpx.PageLimit(c)
	if err != nil {
		return err
	}
	items, more, err := a.store.List(c, c.Param("ns"), functions.ListOptions{After: c.Query("continue"), Limit: limit})
	if err != nil {
		return err
	}
	for i, fn := range items {
		items[i] = fn.Public()
	}
	c.JSON(http.StatusOK, httpx.NewListResponse(items, more, func(fn *functions.Function) string { return fn.Name }))
	return nil
}

func (a *API) get(c *gin.Context) error {
	fn, err := a.store.Get(c, key(c))
	if err != nil {
		return notFound(err, key(c))
	}
	c.JSON(http.StatusOK, fn.Public())
	return nil
}

func notFound(err error, k functions.Key) error {
	if errors.Is(err, functions.ErrNotFound) {
		return httpx.Errorf(http.StatusNotFound, "function %q not found in namespace %q", k.Name, k.Namespace)
	}
	return err
}

func (a *API) update(c *gin.Context) error {
	k := key(c)
	var fn functions.Function
	if err := httpx.DecodeJSON(c, &fn); err != nil {
		return err
	}
	if err := httpx.BindNames(c, "function", &fn.Namespace, &fn.Name, true); err != nil {
		return err
	}
	functions.ApplyDefaults(&fn.Spec, a.runtimes)
	if err := functions.Validate(&fn, a.runtimes); err != nil {
		return err
	}
	updated, err := a.store.UpdateSpec(c, k, fn.Spec)
	if err != nil {
		return notFound(err, k)
	}
	a.notifier.Changed(k)
	c.JSON(http.StatusOK, updated.Public())
	return nil
}

// delete deletes a function with its triggers and jobs, and answers what
// was deleted. The dependents go first, so that none of them fires for the
// function while it goes, and once more after it is gone, for any that
// were created meanwhile.
func (a *API) delete(c *gin.Context) error {
	k := key(c)
	if _, err := a.store.Get(c, k); err != nil {
		return notFound(err, k)
	}
	deleted, err := a.dependents.DeleteDependents(c, k)
	if err != nil {
		return fmt.Errorf("deleting the dependents of %s: %w", k, err)
	}
	if err := a.store.Delete(c, k); err != nil {
		return notFound(err, k)
	}
	a.notifier.Changed(k)
	late, err := a.dependents.DeleteDependents(c, k)
	if err != nil {
		return fmt.Errorf("deleting the dependents of %s: %w", k, err)
	}
	for kind, names := range late {
		if len(names) == 0 {
			continue
		}
		// A name in both was deleted, created again and deleted again.
		deleted[kind] = slices.Compact(slices.Sorted(slices.Values(slices.Concat(deleted[kind], names))))
	}
	c.JSON(http.StatusOK, functions.Deletion{Name: k.Name, Namespace: k.Namespace, Deleted: deleted})
	return nil
}

// upload stores a zip as the function's code. The zip is spooled to a file
// while it is hashed, checked entry by entry and inflated (a bad zip is
// refused with a message naming the entry or the limit), checked for the
// handler's file, and only then stored: a refused upload changes nothing.
func (a *API) upload(c *gin.Context) error {
	k := key(c)
	fn, err := a.store.Get(c, k)
	if err != nil {
		return notFound(err, k)
	}
	body, err := zipBody(c)
	if err != nil {
		return err
	}
	up, err := a.spool(body)
	if err != nil {
		return err
	}
	defer up.close()
	code, err := safezip.Inspect(up.at, up.size, a.limits)
	if e, ok := errors.AsType[*safezip.Error](err); ok {
		return httpx.Errorf(http.StatusBadRequest, "%v", e)
	}
	if err != nil {
		return fmt.Errorf("checking the upload of %s: %w", k, err)
	}
	// A spec with an unknown runtime (one removed from the server since)
	// cannot say which file the handler needs; its build will say why.
	if p, err := a.runtimes.Get(fn.Runtime); err == nil {
		if err := build.CheckHandler(p, fn.Handler, code); err != nil {
			return httpx.Errorf(http.StatusBadRequest, "%v", err)
		}
	}
	blob, err := a.blobs.Put(c, io.NewSectionReader(up.at, 0, up.size))
	if err != nil {
		return fmt.Errorf("storing the upload of %s: %w", k, err)
	}
	if blob.SHA256 != up.sha256 {
		return fmt.Errorf("blob store returned key %s for content with SHA-256 %s", blob.SHA256, up.sha256)
	}
	updated, err := a.store.SetCode(c, k, blob.SHA256)
	if err != nil {
		return notFound(err, k)
	}
	a.notifier.Changed(k)
	c.JSON(http.StatusAccepted, updated.Public())
	return nil
}

// zipBody returns the zip in the request: the raw body, or the multipart
// form field "file".
func zipBody(c *gin.Context) (io.Reader, error) {
	ct := c.GetHeader("Content-Type")
	if ct == "" {
		return c.Request.Body, nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return nil, httpx.Errorf(http.StatusUnsupportedMediaType, "invalid Content-Type %q", ct)
	}
	switch mt {
	case "application/zip", "application/x-zip-compressed", "application/octet-stream":
		return c.Request.Body, nil
	case "multipart/form-data":
		mr, err := c.Request.MultipartReader()
		if err != nil {
			return nil, httpx.Errorf(http.StatusBadRequest, "reading the multipart body: %v", err)
		}
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				return nil, httpx.Errorf(http.StatusBadRequest, `multipart body has no field "file"`)
			}
			if err != nil {
				return nil, httpx.Errorf(http.StatusBadRequest, "reading the multipart body: %v", err)
			}
			if part.FormName() == "file" {
				return part, nil
			}
		}
	}
	return nil, httpx.Errorf(http.StatusUnsupportedMediaType, "upload a zip as application/zip or as the multipart form field \"file\", not %s", mt)
}

// memSpoolBytes is the largest upload spooled in memory rather than to a
// file: most functions' code is a few kilobytes, and a file created and
// removed per upload is most of what spooling costs.
const memSpoolBytes = 1 << 20

// spooled is an upload held while it is checked: in memory when it is at
// most memSpoolBytes, else in a temporary file.
type spooled struct {
	at     io.ReaderAt
	size   int64
	sha256 string
	file   *os.File // nil in memory
}

// close removes the spool file, if any.
func (s *spooled) close() {
	if s.file != nil {
		s.file.Close()
		os.Remove(s.file.Name())
	}
}

// spool reads at most the compressed-size limit of r, in memory or into a
// temporary file, and returns it with its size and SHA-256.
func (a *API) spool(r io.Reader) (*spooled, error) {
	limit := a.limits.MaxCompressedBytes
	h := sha256.New()
	r = io.TeeReader(io.LimitReader(r, limit+1), h)
	var head bytes.Buffer
	n, err := io.CopyN(&head, r, memSpoolBytes+1)
	switch {
	case err == io.EOF:
		if n == 0 {
			return nil, httpx.Errorf(http.StatusBadRequest, "the upload is empty; send a zip of your code")
		}
		if n > limit {
			return nil, a.tooLarge()
		}
		return &spooled{at: bytes.NewReader(head.Bytes()), size: n, sha256: hex.EncodeToString(h.Sum(nil))}, nil
	case err != nil:
		return nil, httpx.Errorf(http.StatusBadRequest, "reading the upload: %v", err)
	}
	f, err := os.CreateTemp(a.tempDir, "upload-*.zip")
	if err != nil {
		return nil, fmt.Errorf("creating a spool file: %w", err)
	}
	up := &spooled{at: f, file: f}
	w := &spoolWriter{f: f}
	size, err := io.Copy(w, io.MultiReader(&head, r))
	switch {
	case w.err != nil:
		// The server's disk, not the upload: a 500 whose cause (with the
		// spool file's path) goes to the log only.
		err = fmt.Errorf("spooling an upload: %w", w.err)
	case err == nil && size > limit:
		err = a.tooLarge()
	case err != nil:
		err = httpx.Errorf(http.StatusBadRequest, "reading the upload: %v", err)
	}
	if err != nil {
		up.close()
		return nil, err
	}
	up.size, up.sha256 = size, hex.EncodeToString(h.Sum(nil))
	return up, nil
}

func (a *API) tooLarge() error {
	return httpx.Errorf(http.StatusRequestEntityTooLarge, "the upload exceeds the limit of %s for a zip",
		humanize.IBytes(uint64(a.limits.MaxCompressedBytes)))
}

// spoolWriter writes to the spool file and remembers its failure, so that
// spool tells a failing disk from a failing client.
type spoolWriter struct {
	f   *os.File
	err error
}

func (w *spoolWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}
