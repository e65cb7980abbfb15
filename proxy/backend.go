package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxproxy/ctxproxy/gpu"
)

// Backend kinds.
const (
	KindAuto    = "auto"
	KindOllama  = "ollama"
	KindOpenAI  = "openai"
	kindUnknown = "unknown"
)

// backendKind tells whether the backend is Ollama. With backend.kind auto
// it asks GET /api/version once and remembers the answer; a failed request
// makes it ask again later (the backend may have been down or replaced).
type backendKind struct {
	configured string
	detected   atomic.Value // string
	checked    atomic.Int64 // unix ns of the last probe
}

// kind returns ollama, openai, or unknown (not detected yet).
func (s *Server) kind(ctx context.Context) string {
	if k := s.bk.configured; k == KindOllama || k == KindOpenAI {
		return k
	}
	if k, _ := s.bk.detected.Load().(string); k != "" && k != kindUnknown {
		return k
	}
	// Ask at most every few seconds while undetected.
	last := s.bk.checked.Load()
	if time.Since(time.Unix(0, last)) < 3*time.Second || !s.bk.checked.CompareAndSwap(last, time.Now().UnixNano()) {
		return kindUnknown
	}
	k := s.detectKind(ctx)
	s.bk.detected.Store(k)
	if k != kindUnknown {
		s.log.Info("backend detected", "kind", k, "url", s.backend.Redacted())
	}
	return k
}

// forgetKind makes the next request detect the kind again.
func (s *Server) forgetKind() {
	if s.bk.configured == KindAuto {
		s.bk.detected.Store(kindUnknown)
		s.bk.checked.Store(0)
	}
}

func (s *Server) detectKind(ctx context.Context) string {
	// The answer is for every request: a client that goes away must not
	// leave it unknown for the others.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	var v struct {
		Version string `json:"version"`
	}
	status, err := s.backendJSON(ctx, http.MethodGet, "/api/version", nil, &v)
	switch {
	case err == nil && status == http.StatusOK && v.Version != "":
		return KindOllama
	case status != 0:
		return KindOpenAI // it answered HTTP, but not as Ollama
	}
	return kindUnknown
}

// backendJSON calls the backend itself (not on behalf of a client) and
// decodes a JSON answer into out. It returns the status, 0 when the
// backend could not be reached.
func (s *Server) backendJSON(ctx context.Context, method, path string, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.backend.JoinPath(path).String(), body)
	if err != nil {
		return 0, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	s.lastBackendOK.Store(time.Now().UnixNano())
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// modelInfo is what ctxproxy knows of one Ollama model from /api/show and
// /api/tags: its trained context and the facts that size its KV cache.
type modelInfo struct {
	facts   gpu.ModelFacts
	err     error
	weights uint64
	fetched time.Time
}

// models caches modelInfo per model name. One fetch per model runs at a
// time; the others wait for it.
type models struct {
	mu      sync.Mutex
	entries map[string]*modelEntry
}

type modelEntry struct {
	ready chan struct{}
	info  modelInfo
}

// How long model facts are trusted: a model can be re-pulled with other
// weights under the same name.
const (
	modelInfoTTL   = 10 * time.Minute
	modelErrorTTL  = 30 * time.Second
	maxModelsCache = 256
)

// modelInfo returns the facts of an Ollama model, fetching them once.
func (s *Server) modelInfo(ctx context.Context, name string) modelInfo {
	s.models.mu.Lock()
	if s.models.entries == nil {
		s.models.entries = map[string]*modelEntry{}
	}
	e, ok := s.models.entries[name]
	if ok {
		select {
		case <-e.ready:
			ttl := modelInfoTTL
			if e.info.err != nil {
				ttl = modelErrorTTL
			}
			if time.Since(e.info.fetched) > ttl {
				ok = false
			}
		default:
		}
	}
	if !ok {
		if len(s.models.entries) >= maxModelsCache {
			clear(s.models.entries) // names are client data: bound the map
		}
		e = &modelEntry{ready: make(chan struct{})}
		s.models.entries[name] = e
		s.models.mu.Unlock()
		e.info = s.fetchModelInfo(ctx, name)
		close(e.ready)
		return e.info
	}
	s.models.mu.Unlock()
	select {
	case <-e.ready:
		return e.info
	case <-ctx.Done():
		return modelInfo{err: ctx.Err()}
	}
}

func (s *Server) fetchModelInfo(ctx context.Context, name string) modelInfo {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	info := modelInfo{fetched: time.Now()}
	var show struct {
		ModelInfo map[string]any `json:"model_info"`
	}
	if _, err := s.backendJSON(ctx, http.MethodPost, "/api/show", map[string]string{"model": name}, &show); err != nil {
		info.err = err
		s.log.Warn("could not read the model's facts from the backend", "model", name, "err", err)
		return info
	}
	info.facts, info.err = gpu.ParseModelInfo(show.ModelInfo)
	if info.err != nil {
		s.log.Warn("model facts incomplete", "model", name, "err", info.err)
	}
	var tags struct {
		Models []struct {
			Name  string `json:"name"`
			Model string `json:"model"`
			Size  uint64 `json:"size"`
		} `json:"models"`
	}
	if _, err := s.backendJSON(ctx, http.MethodGet, "/api/tags", nil, &tags); err == nil {
		for _, m := range tags.Models {
			if m.Name == name || m.Model == name || m.Name == name+":latest" {
				info.weights = m.Size
			}
		}
	}
	return info
}

// LoadedModels is the gpu monitor's view of /api/ps: which models Ollama
// holds in memory and how much each takes, so their memory is not taken
// for memory someone else uses.
func (s *Server) LoadedModels(ctx context.Context) ([]gpu.LoadedModel, error) {
	if s.kind(ctx) != KindOllama {
		return nil, nil
	}
	var ps struct {
		Models []struct {
			Name          string `json:"name"`
			Model         string `json:"model"`
			Size          uint64 `json:"size"`
			SizeVRAM      uint64 `json:"size_vram"`
			ContextLength int    `json:"context_length"`
		} `json:"models"`
	}
	if _, err := s.backendJSON(ctx, http.MethodGet, "/api/ps", nil, &ps); err != nil {
		return nil, err
	}
	out := make([]gpu.LoadedModel, 0, len(ps.Models))
	for _, m := range ps.Models {
		out = append(out, gpu.LoadedModel{Name: m.Name, Size: m.Size, SizeVRAM: m.SizeVRAM, NumCtx: m.ContextLength})
	}
	return out, nil
}

// ModelFacts returns what the backend says of model: the facts that size
// its KV cache and its weights in bytes (for `ctxproxy gpu`).
func (s *Server) ModelFacts(ctx context.Context, model string) (gpu.ModelFacts, uint64, error) {
	mi := s.modelInfo(ctx, model)
	return mi.facts, mi.weights, mi.err
}
