//go:build cgo && linux

package gpu

import (
	"context"
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlLib is the part of nvml.Interface the NVIDIA probe uses; tests pass
// go-nvml's mock servers (pkg/nvml/mock/dgxa100).
type nvmlLib interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
	Extensions() nvml.ExtendedInterface
}

// NVIDIA measures NVIDIA GPUs through NVML.
//
// go-nvml dlopens libnvidia-ml.so.1 inside Init; every other call jumps
// into that library, so calling anything after a failed Init (Shutdown
// included) kills the process. NVIDIA therefore exists only after a
// successful Init and tracks it in initialized.
type NVIDIA struct {
	lib nvmlLib

	mu          sync.Mutex
	initialized bool
	memoryV2    bool // nvmlDeviceGetMemoryInfo_v2 is in the loaded library
}

// OpenNVIDIA initializes NVML. On a machine without the NVIDIA driver it
// returns an error wrapping ErrUnavailable and touches nothing else.
func OpenNVIDIA() (*NVIDIA, error) {
	return openNVIDIA(nvml.New())
}

func openNVIDIA(lib nvmlLib) (*NVIDIA, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		// Return.Error only formats the code here (no call into NVML
		// unless the library loaded, in which case it is safe).
		return nil, fmt.Errorf("%w: nvml init: %v", ErrUnavailable, ret)
	}
	p := &NVIDIA{lib: lib, initialized: true}
	// The _v2 call reports memory reserved by the driver apart from used
	// memory; older drivers lack the symbol, and calling a missing symbol
	// is fatal, so look it up first.
	if ext := lib.Extensions(); ext != nil {
		p.memoryV2 = ext.LookupSymbol("nvmlDeviceGetMemoryInfo_v2") == nil
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS || n == 0 {
		p.Close()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("%w: nvml device count: %v", ErrUnavailable, ret)
		}
		return nil, fmt.Errorf("%w: nvml found no GPU", ErrUnavailable)
	}
	return p, nil
}

// Name returns "nvidia".
func (p *NVIDIA) Name() string { return ProbeNVIDIA }

// Devices reports each GPU's memory.
func (p *NVIDIA) Devices(ctx context.Context) ([]Device, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.initialized {
		return nil, ErrClosed
	}
	n, ret := p.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu: nvml device count: %v", ret)
	}
	devices := make([]Device, 0, n)
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		h, ret := p.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("gpu: nvml device %d: %v", i, ret)
		}
		d, err := p.device(i, h)
		if err != nil {
			return nil, err
		}
		devices = append(devices, d)
	}
	if len(devices) == 0 {
		return nil, ErrNoDevice
	}
	return devices, nil
}

func (p *NVIDIA) device(i int, h nvml.Device) (Device, error) {
	name, ret := h.GetName()
	if ret != nvml.SUCCESS {
		name = fmt.Sprintf("NVIDIA GPU %d", i)
	}
	if p.memoryV2 {
		m, ret := h.GetMemoryInfo_v2()
		if ret == nvml.SUCCESS {
			return newDevice(ProbeNVIDIA, name, m.Total, m.Free), nil
		}
		// Fall back to v1 for this and later samples (vGPU and some
		// drivers answer NOT_SUPPORTED).
		p.memoryV2 = false
	}
	m, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("gpu: nvml memory of device %d: %v", i, ret)
	}
	return newDevice(ProbeNVIDIA, name, m.Total, m.Free), nil
}

// Close shuts NVML down. Only a probe whose Init succeeded exists, so the
// Shutdown call is always allowed; later calls do nothing.
func (p *NVIDIA) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.initialized {
		return nil
	}
	p.initialized = false
	if ret := p.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("gpu: nvml shutdown: %v", ret)
	}
	return nil
}
