// Package modelinfo holds what ctxproxy knows of a model from the
// backend's own description of it: the facts of its architecture that size
// its KV cache (Facts, read from Ollama's /api/show model_info), and a
// model the backend holds in memory (Loaded, from /api/ps). Both the
// backend client and the GPU sizing read it; it depends on neither.
package modelinfo
