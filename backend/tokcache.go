package backend

import (
	"cmp"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ctxproxy/ctxproxy/budget/exact"
)

// diskCache keeps the part of each model digest's verbose /api/show that
// counting needs (exact.Show), in a directory, so that a restarted
// ctxproxy builds the tokenizer of a model it has seen without asking the
// backend, which answers a verbose /api/show by reading the model's file
// and sending megabytes. A digest's file holds the vocabulary's arrays
// typed (tokfile.go), read with one os.ReadFile and sliced, in a few
// milliseconds where the gzipped JSON ctxproxy kept before took about a
// hundred; a file of that old kind is still read, once: it is written
// again in the new form and removed. A zero diskCache keeps nothing.
type diskCache struct {
	dir string
	log *slog.Logger
}

// diskCacheFiles bounds the digests kept; the least recently written go.
const diskCacheFiles = 64

// The files' names: the digest, then vocabExt; oldExt for the gzipped
// JSON of the verbose /api/show that ctxproxy kept before.
const (
	vocabExt = ".vocab"
	oldExt   = ".json.gz"
)

// path is the file of digest ("sha256:…") with extension ext; "" for a
// digest that is not a plain name.
func (d diskCache) path(digest, ext string) string {
	name := strings.ReplaceAll(digest, ":", "-")
	if d.dir == "" || name == "" || strings.ContainsAny(name, `/\.`) {
		return ""
	}
	return filepath.Join(d.dir, name+ext)
}

// has reports whether a file is kept for digest (of either kind).
func (d diskCache) has(digest string) bool {
	for _, ext := range []string{vocabExt, oldExt} {
		if p := d.path(digest, ext); p != "" {
			if _, err := os.Stat(p); err == nil {
				return true
			}
		}
	}
	return false
}

// load returns the Show stored for digest, its Vocab set.
func (d diskCache) load(digest string) (exact.Show, bool) {
	p := d.path(digest, vocabExt)
	if p == "" {
		return exact.Show{}, false
	}
	if info, err := os.Stat(p); err == nil && info.Size() > showLimit {
		d.log.Warn("a cached tokenizer is too large; asking the backend", "file", p, "size", info.Size())
		return exact.Show{}, false
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return d.loadOld(digest)
	}
	if err == nil {
		var show exact.Show
		if show, err = decodeVocabFile(data); err == nil {
			return show, true
		}
	}
	d.log.Warn("a cached tokenizer does not read; asking the backend", "file", p, "err", err)
	return exact.Show{}, false
}

// loadOld reads digest's file of the old kind, if there is one, writes it
// again in the new form and removes it.
func (d diskCache) loadOld(digest string) (exact.Show, bool) {
	p := d.path(digest, oldExt)
	f, err := os.Open(p)
	if err != nil {
		return exact.Show{}, false
	}
	defer os.Remove(p)
	defer f.Close()
	var show exact.Show
	zr, err := gzip.NewReader(f)
	if err == nil {
		err = json.NewDecoder(io.LimitReader(zr, showLimit)).Decode(&show)
	}
	if err != nil {
		d.log.Warn("a cached tokenizer does not read; asking the backend", "file", p, "err", err)
		return exact.Show{}, false
	}
	d.store(digest, show)
	return show, true
}

// store writes show for digest (to a temporary file renamed into place,
// so a reader never sees half of one), then drops the oldest files past
// diskCacheFiles. Failures are logged: the cache is an optimization.
func (d diskCache) store(digest string, show exact.Show) {
	p := d.path(digest, vocabExt)
	if p == "" {
		return
	}
	data, err := encodeVocabFile(show)
	if err != nil {
		d.log.Debug("tokenizer cache not written", "file", p, "err", err)
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
	_, err = tmp.Write(data)
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

// prune removes the least recently written files past diskCacheFiles,
// those of the old kind among them.
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
		if info, err := e.Info(); err == nil && (strings.HasSuffix(e.Name(), vocabExt) || strings.HasSuffix(e.Name(), oldExt)) {
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
