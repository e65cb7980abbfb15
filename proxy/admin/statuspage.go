package admin

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"time"
)

// ui is the status page: HTML, CSS and JavaScript built into the binary,
// with no external asset, so it works where the machine cannot reach the
// internet and shows what this very binary serves.
//
//go:embed ui
var ui embed.FS

// asset is one file of the status page, ready to serve.
type asset struct {
	name string
	data []byte
	etag string
	ct   string
}

// uiAssets are the status page's files by URL path under /ctxproxy/.
var uiAssets = loadAssets()

func loadAssets() map[string]asset {
	out := map[string]asset{}
	_ = fs.WalkDir(ui, "ui", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := ui.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		out[p] = asset{name: path.Base(p), data: data, etag: `"` + hex.EncodeToString(sum[:8]) + `"`,
			ct: mime.TypeByExtension(path.Ext(p))}
		return nil
	})
	return out
}

// pagePolicy keeps the page to its own files and its own origin: no
// script but app.js, no inline script, no frame around it. The JavaScript
// sets element styles through the CSSOM, which style-src does not govern.
const pagePolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// statusRoutes registers the status page: GET /ctxproxy/ (exactly) and
// its files under /ctxproxy/ui/. The page reads everything it shows from
// the admin API with the user's token; the page itself holds no data, so
// it needs none.
func statusRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /ctxproxy", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ctxproxy/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /ctxproxy/{$}", func(w http.ResponseWriter, r *http.Request) {
		serveAsset(w, r, "ui/index.html")
	})
	mux.HandleFunc("GET /ctxproxy/ui/{file}", func(w http.ResponseWriter, r *http.Request) {
		serveAsset(w, r, "ui/"+r.PathValue("file"))
	})
}

func serveAsset(w http.ResponseWriter, r *http.Request, name string) {
	a, ok := uiAssets[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.ct)
	h.Set("ETag", a.etag)
	// Revalidate every time: a new binary serves a new page at once.
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", pagePolicy)
	h.Set("X-Frame-Options", "DENY")
	http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.data))
}
