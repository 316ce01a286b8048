package admin

import (
	"embed"
	"fmt"
	"io/fs"
	"net/http"
)

// The dashboard: plain HTML, CSS and JavaScript with its own canvas charts,
// so it works with no network access beyond this server.
//
//go:embed web
var webFS embed.FS

func webRoot() (fs.FS, error) {
	root, err := fs.Sub(webFS, "web")
	if err != nil {
		return nil, fmt.Errorf("admin: dashboard assets: %w", err)
	}
	return root, nil
}

func staticFiles(root fs.FS) http.Handler {
	fsrv := http.FileServerFS(root)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		fsrv.ServeHTTP(w, r)
	})
}

// staticFile serves one embedded file at a fixed path (the dashboard at /).
func staticFile(root fs.FS, name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, root, name)
	})
}
