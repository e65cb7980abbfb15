package backend

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ctxproxy/ctxproxy/budget/exact"
)

// diskCache keeps the part of each model digest's verbose /api/show that
// counting needs (exact.Show), gzipped, in a directory, so that a
// restarted ctxproxy builds the tokenizer of a model it has seen without
// asking the backend, which answers a verbose /api/show by reading the
// model's file and sending megabytes. A zero diskCache keeps nothing.
type diskCache struct {
	dir string
	log *slog.Logger
}

// diskCacheFiles bounds the digests kept; the least recently written go.
const diskCacheFiles = 64

// path is the file of digest ("sha256:…"); "" for a digest that is not a
// plain name.
func (d diskCache) path(digest string) string {
	name := strings.ReplaceAll(digest, ":", "-")
	if d.dir == "" || name == "" || strings.ContainsAny(name, `/\.`) {
		return ""
	}
	return filepath.Join(d.dir, name+".json.gz")
}

// load returns the Show stored for digest.
func (d diskCache) load(digest string) (exact.Show, bool) {
	p := d.path(digest)
	if p == "" {
		return exact.Show{}, false
	}
	f, err := os.Open(p)
	if err != nil {
		return exact.Show{}, false
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		d.log.Warn("a cached tokenizer does not read; asking the backend", "file", p, "err", err)
		return exact.Show{}, false
	}
	var show exact.Show
	if err := json.NewDecoder(io.LimitReader(zr, showLimit)).Decode(&show); err != nil {
		d.log.Warn("a cached tokenizer does not read; asking the backend", "file", p, "err", err)
		return exact.Show{}, false
	}
	return show, true
}

// store writes show for digest (to a temporary file renamed into place,
// so a reader never sees half of one), then drops the oldest files past
// diskCacheFiles. Failures are logged: the cache is an optimization.
func (d diskCache) store(digest string, show exact.Show) {
	p := d.path(digest)
	if p == "" {
		return
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(show); err != nil || zw.Close() != nil {
		return
	}
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		d.log.Debug("tokenizer cache not written", "dir", d.dir, "err", err)
		return
	}
	tmp, err := os.CreateTemp(d.dir, ".tmp-*")
	if err != nil {
		d.log.Debug("tokenizer cache not written", "dir", d.dir, "err", err)
		return
	}
	_, err = tmp.Write(buf.Bytes())
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
		d.log.Debug("tokenizer cache not written", "file", p, "err", err)
		return
	}
	d.prune()
}

// prune removes the least recently written files past diskCacheFiles.
func (d diskCache) prune() {
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return
	}
	type file struct {
		name string
		mod  int64
	}
	var files []file
	for _, e := range entries {
		if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".json.gz") {
			files = append(files, file{e.Name(), info.ModTime().UnixNano()})
		}
	}
	if len(files) <= diskCacheFiles {
		return
	}
	slices.SortFunc(files, func(a, b file) int { return cmp.Compare(b.mod, a.mod) })
	for _, f := range files[diskCacheFiles:] {
		os.Remove(filepath.Join(d.dir, f.name))
	}
}
