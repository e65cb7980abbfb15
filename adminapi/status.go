package adminapi

import "strings"

// Status is GET /ctxproxy/status.
type Status struct {
	Version       string          `json:"version"`
	UptimeSeconds float64         `json:"uptime_seconds"`
	Backend       BackendStatus   `json:"backend"`
	Strategy      StrategyStatus  `json:"strategy"`
	Context       ContextStatus   `json:"context"`
	GPU           GPUStatus       `json:"gpu"`
	Models        []ModelStatus   `json:"models"`
	Snapshots     SnapshotsStatus `json:"snapshots"`
	Summarize     SummarizeStatus `json:"summarize"`
	Sessions      int             `json:"sessions"`
	Inflight      int64           `json:"inflight"`
	// Replica names this ctxproxy (its host name) when replicas share
	// the Redis store; empty otherwise.
	Replica string `json:"replica,omitempty"`
	// Backends are the servers behind ctxproxy when there are several
	// (backends:); absent with one, whose view is Backend and GPU.
	Backends []ServerStatus `json:"backends,omitempty"`
}

// ServerStatus is one of several servers behind ctxproxy.
type ServerStatus struct {
	Name string `json:"name"`
	// URL is its root, a password hidden.
	URL string `json:"url"`
	// Kind and Version are what it said it is so far ("" before).
	Kind    string `json:"kind"`
	Version string `json:"version,omitempty"`
	// Up is false while it is taken out: it could not be reached, or
	// refused a request as unable to serve it. DownUntil (RFC 3339) is
	// when requests go to it again at the latest, LastError why.
	Up        bool   `json:"up"`
	DownUntil string `json:"down_until,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// Inflight is its requests now; Served all it was sent.
	Inflight int    `json:"inflight"`
	Served   uint64 `json:"served"`
	// Memory is where its free memory is read for num_ctx: "local",
	// "none" or "ctxproxy at <URL>".
	Memory string `json:"memory"`
	// ModelsListed and ModelsLoaded count what it last listed (its
	// /api/tags and /api/ps).
	ModelsListed int `json:"models_listed"`
	ModelsLoaded int `json:"models_loaded"`
	// GPU is its memory's last reading; absent when none is known.
	GPU *GPUStatus `json:"gpu,omitempty"`
}

// BackendStatus is the server behind ctxproxy.
type BackendStatus struct {
	URL   string `json:"url"`
	Kind  string `json:"kind"`
	Ready bool   `json:"ready"`
}

// StrategyStatus is the context strategy in force.
type StrategyStatus struct {
	Mode       string  `json:"mode"`
	Threshold  float64 `json:"threshold"`
	Target     float64 `json:"target"`
	OnOverflow string  `json:"on_overflow"`
	// EffectiveThreshold is where trimming starts now: lower than
	// Threshold while GPU memory is under pressure (the guard's
	// compress_at level, README "num_ctx from the memory actually free").
	EffectiveThreshold float64 `json:"effective_threshold"`
}

// ContextStatus is how num_ctx is chosen.
type ContextStatus struct {
	Auto           bool   `json:"auto"`
	TargetSize     int    `json:"target_size"`
	MinSize        int    `json:"min_size"`
	MaxSize        int    `json:"max_size"`
	KVQuantization string `json:"kv_quantization"`
	NumParallel    int    `json:"num_parallel"`
}

// GPUStatus is the memory the monitor last sampled.
type GPUStatus struct {
	Probe string `json:"probe"`
	// Level is the memory guard's: ok, compress, shrink or emergency.
	Level string `json:"level"`
	Total uint64 `json:"total"`
	Used  uint64 `json:"used"`
	Free  uint64 `json:"free"`
	// Usage is Used/Total. GuardUsage is what the guard judges: memory
	// in use less what Ollama's loaded models hold.
	Usage      float64  `json:"usage"`
	GuardUsage float64  `json:"guard_usage"`
	Devices    []Device `json:"devices"`
	Error      string   `json:"error,omitempty"`
}

// Device is one GPU, or the system memory when there is none.
type Device struct {
	// Vendor is the probe that found it: "nvidia", "amd", "apple" or "cpu".
	Vendor string `json:"vendor"`
	// Name is the product name, e.g. "NVIDIA A100-SXM4-40GB".
	Name  string `json:"name"`
	Total uint64 `json:"total"`
	Used  uint64 `json:"used"`
	Free  uint64 `json:"free"`
}

// ModelStatus is one model requests used, or calibration learned about.
type ModelStatus struct {
	Name            string            `json:"name"`
	MaxTokens       int               `json:"max_tokens"`
	MaxOutputTokens int               `json:"max_output_tokens"`
	Effective       int               `json:"effective"`
	NumCtx          int               `json:"num_ctx"`
	BytesPerToken   uint64            `json:"bytes_per_token"`
	Calibration     CalibrationStatus `json:"calibration"`
	Counting        CountingStatus    `json:"counting"`
	Reason          string            `json:"reason"`
}

// CountingStatus says how a model's prompts were last counted, and how
// exact counts compared with the backend's own reports.
type CountingStatus struct {
	// Method is exact (the model's own tokenizer), backend (the backend's
	// tokenize API) or estimate (tiktoken + calibration).
	Method    string `json:"method"`
	Tokenizer string `json:"tokenizer,omitempty"`
	// Checked is the uncensored reports compared; WorstError the largest
	// relative difference; Disagreed that it passed 1% and the model is
	// counted by estimate since.
	Checked    int64   `json:"checked,omitempty"`
	WorstError float64 `json:"worst_error,omitempty"`
	Disagreed  bool    `json:"disagreed,omitempty"`
	// Misses are the request shapes whose exact counts disagreed with
	// the backend's, each counted by estimate since; the model's other
	// requests stay exact.
	Misses []CountMiss `json:"misses,omitempty"`
	// Reason says why the last request to an Ollama model was not
	// counted exactly: the model's tokenizer or renderer is one ctxproxy
	// does not have, or its shape missed before.
	Reason string `json:"reason,omitempty"`
}

// CountMiss is an exact count that disagreed with the backend's report:
// the request's shape ("tools", "thinking", "images", joined by "+", or
// "plain"), both counts, and how ctxproxy counted.
type CountMiss struct {
	Shape     string `json:"shape"`
	Estimate  int    `json:"estimate"`
	Reported  int    `json:"reported"`
	Tokenizer string `json:"tokenizer,omitempty"`
}

// CalibrationStatus is what the estimate learned from the backend's
// reports.
type CalibrationStatus struct {
	Ratio        float64 `json:"ratio"`
	Observations int     `json:"observations"`
}

// SnapshotsStatus is the session store.
type SnapshotsStatus struct {
	Store         string  `json:"store"`
	AutoThreshold float64 `json:"auto_threshold"`
	MaxCount      int     `json:"max_count"`
}

// SummarizeStatus is the summarizer.
type SummarizeStatus struct {
	Model      string `json:"model"`
	KeepRecent int    `json:"keep_recent"`
}

// Model returns the status entry for a model name; "llama3.1" and
// "llama3.1:latest" are the same model to Ollama.
func (s *Status) Model(name string) (ModelStatus, bool) {
	for _, m := range s.Models {
		if SameModel(m.Name, name) {
			return m, true
		}
	}
	return ModelStatus{}, false
}

// SameModel reports whether two model names are one model to Ollama,
// which reads a name without a tag as ":latest".
func SameModel(a, b string) bool {
	return a != "" && strings.TrimSuffix(a, ":latest") == strings.TrimSuffix(b, ":latest")
}

// RunningModel is one entry of Ollama's GET /api/ps, which ctxproxy passes
// through: the only place that says how much memory the model itself takes.
type RunningModel struct {
	Name     string `json:"name"`
	Model    string `json:"model"`
	Size     int64  `json:"size"`
	SizeVRAM int64  `json:"size_vram"`
}
