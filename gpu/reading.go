package gpu

import (
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/modelinfo"
)

// Reading is one sample of device memory, as the Monitor took it. The
// request path reads one no older than poll_active (Monitor.Current);
// its slices are shared and must not be modified.
type Reading struct {
	// Seq numbers the samples from 1; 0 means no sample has been taken.
	Seq   uint64
	Time  time.Time
	Probe string
	// Devices is empty when the probe failed; Err says why.
	Devices []Device
	Err     error
	// Models are the models Ollama had loaded at the same moment (its
	// /api/ps), when ModelsKnown; sampling them together with device
	// memory keeps the two consistent (a model is either in Models or
	// in Free, never both or neither).
	Models      []modelinfo.Loaded
	ModelsKnown bool
	// Level is the memory guard's level after this sample.
	Level Level
}

// onDevice is the memory m holds on the device the probe measures: GPU
// memory for a GPU probe (Apple included: Metal wires unified memory),
// system RAM for the cpu probe.
func onDevice(m modelinfo.Loaded, probe string) uint64 {
	if probe == ProbeCPU {
		return m.Size - min(m.SizeVRAM, m.Size)
	}
	return m.SizeVRAM
}

// Model finds a loaded model by name; "llama3.1" matches "llama3.1:latest",
// as Ollama names it.
func (s Reading) Model(name string) (modelinfo.Loaded, bool) {
	if !strings.Contains(name, ":") {
		name += ":latest"
	}
	for _, m := range s.Models {
		n := m.Name
		if !strings.Contains(n, ":") {
			n += ":latest"
		}
		if n == name {
			return m, true
		}
	}
	return modelinfo.Loaded{}, false
}

// OK reports whether the reading has device memory to size from.
func (s Reading) OK() bool { return len(s.Devices) > 0 }

// Total is the memory of all devices. Ollama spreads a model's layers, and
// their KV cache, over every GPU it uses, so sizing counts them together.
func (s Reading) Total() uint64 { return s.sum(func(d Device) uint64 { return d.Total }) }

// Used is the memory in use on all devices.
func (s Reading) Used() uint64 { return s.sum(func(d Device) uint64 { return d.Used }) }

// Free is the free memory of all devices.
func (s Reading) Free() uint64 { return s.sum(func(d Device) uint64 { return d.Free }) }

// ModelMemory is the memory the loaded models hold on the devices.
func (s Reading) ModelMemory() uint64 {
	var n uint64
	for _, m := range s.Models {
		n += onDevice(m, s.Probe)
	}
	return n
}

func (s Reading) sum(f func(Device) uint64) uint64 {
	var n uint64
	for _, d := range s.Devices {
		n += f(d)
	}
	return n
}

// Usage is the fraction of memory the guard judges: memory in use, less
// what Ollama's loaded models hold, over total.
//
// Ollama allocates a model's whole KV cache when it loads it, and ctxproxy
// sizes num_ctx to fill free memory down to the safety buffer, so a device
// serving a well-sized model is nearly full by design; and people run the
// largest model whose weights fit. Counting the models as pressure would
// keep the guard at the emergency level on exactly the machines that are
// set up best. What the guard watches is everything else (other processes,
// the desktop), which is what takes the memory a model needs at its next
// load. Without ModelsKnown it cannot tell them apart and counts all used
// memory.
func (s Reading) Usage() float64 {
	total := s.Total()
	if total == 0 {
		return 0
	}
	used := s.Used()
	if s.ModelsKnown {
		used -= min(s.ModelMemory(), used)
	}
	return float64(used) / float64(total)
}
