// Package gpu measures the memory a model's KV cache can use (NVIDIA through
// NVML, AMD through sysfs, Apple unified memory, or system RAM and cgroup
// limits), turns model facts into KV-cache bytes per token, picks Ollama's
// num_ctx from that, and guards against running out of memory.
package gpu
