package gpu

import "time"

// Snapshot is one sample of device memory, as the Monitor took it. The
// request path reads the latest one without waiting (Monitor.Snapshot);
// its Devices slice is shared and must not be modified.
type Snapshot struct {
	// Seq numbers the samples from 1; 0 means no sample has been taken.
	Seq   uint64
	Time  time.Time
	Probe string
	// Devices is empty when the probe failed; Err says why.
	Devices []Device
	Err     error
	// ModelMemory is the memory held by the models ctxproxy sized that
	// Ollama has loaded (/api/ps size_vram; seed 004 1.2's "model-loaded
	// memory"), and KVCache the part of it that is their KV cache.
	ModelMemory uint64
	KVCache     uint64
	// Level is the memory guard's level after this sample.
	Level Level
}

// OK reports whether the snapshot has device memory to size from.
func (s Snapshot) OK() bool { return len(s.Devices) > 0 }

// Total is the memory of all devices. Ollama spreads a model's layers, and
// their KV cache, over every GPU it uses, so sizing counts them together.
func (s Snapshot) Total() uint64 { return s.sum(func(d Device) uint64 { return d.Total }) }

// Used is the memory in use on all devices.
func (s Snapshot) Used() uint64 { return s.sum(func(d Device) uint64 { return d.Used }) }

// Free is the free memory of all devices (seed 004 1.2's "available").
func (s Snapshot) Free() uint64 { return s.sum(func(d Device) uint64 { return d.Free }) }

func (s Snapshot) sum(f func(Device) uint64) uint64 {
	var n uint64
	for _, d := range s.Devices {
		n += f(d)
	}
	return n
}

// Usage is the fraction of memory the guard judges: memory in use, less
// the KV cache of the models ctxproxy sized, over total.
//
// Ollama allocates a model's whole KV cache when it loads it, and ctxproxy
// sizes num_ctx to fill free memory down to the safety buffer; counting
// that cache as pressure would put every well-sized machine at the
// emergency level. What the guard watches is the rest (weights, other
// processes), which ctxproxy cannot shrink by trimming a conversation.
func (s Snapshot) Usage() float64 {
	total := s.Total()
	if total == 0 {
		return 0
	}
	used := s.Used()
	return float64(used-min(s.KVCache, used)) / float64(total)
}
