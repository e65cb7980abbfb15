package gpu

import (
	"context"
	"fmt"
	"runtime"

	"github.com/shirou/gopsutil/v4/mem"
)

// sysctler reads sysctl values; on darwin it is the real sysctl(3), and
// tests answer for it on any system.
type sysctler interface {
	Uint(name string) (uint64, error)
	String(name string) (string, error)
}

// Apple measures the unified memory an Apple Silicon GPU may use.
//
// Metal lets the GPU wire at most its recommendedMaxWorkingSetSize, which
// is what Ollama reports as the GPU's total (ggml-metal's get_memory). That
// value needs Objective-C, so it is approximated from sysctl: the
// iogpu.wired_limit_mb override when the user set one, otherwise 2/3 of
// RAM up to 36 GiB and 3/4 above. Reported values (16 GiB → 10.7 GiB,
// 64 GiB → 48 GiB, 128 GiB → 107.5 GiB) put the real share at or above
// this rule, so it errs on the side of a smaller num_ctx.
//
// Free is the smaller of what remains of that share and the memory the
// system has available (free + inactive, as Ollama's getFreeMemory counts
// it): the GPU can take neither more than its share nor pages the system
// does not have.
type Apple struct {
	sysctl    sysctler
	available func(ctx context.Context) (uint64, error)
}

// OpenApple returns the Apple probe, or an error wrapping ErrUnavailable
// when this is not macOS on Apple Silicon.
func OpenApple() (*Apple, error) {
	if runtime.GOOS != "darwin" || runtime.GOARCH != "arm64" {
		return nil, fmt.Errorf("%w: not Apple Silicon (%s/%s)", ErrUnavailable, runtime.GOOS, runtime.GOARCH)
	}
	return newApple(hostSysctl{}, availableRAM), nil
}

func newApple(s sysctler, available func(context.Context) (uint64, error)) *Apple {
	return &Apple{sysctl: s, available: available}
}

// Name returns "apple".
func (p *Apple) Name() string { return ProbeApple }

// Close does nothing.
func (p *Apple) Close() error { return nil }

// Devices reports the GPU's share of unified memory as one device.
func (p *Apple) Devices(ctx context.Context) ([]Device, error) {
	ram, err := p.sysctl.Uint("hw.memsize")
	if err != nil {
		return nil, fmt.Errorf("gpu: sysctl hw.memsize: %w", err)
	}
	if ram == 0 {
		return nil, fmt.Errorf("%w: hw.memsize is 0", ErrNoDevice)
	}
	// Unset (or unreadable on older macOS) means the default share.
	limitMB, _ := p.sysctl.Uint("iogpu.wired_limit_mb")
	total := appleWorkingSet(ram, limitMB)
	avail, err := p.available(ctx)
	if err != nil {
		return nil, fmt.Errorf("gpu: available memory: %w", err)
	}
	name, _ := p.sysctl.String("machdep.cpu.brand_string")
	if name == "" {
		name = "Apple Silicon"
	}
	return []Device{newDevice(ProbeApple, name+" (unified memory)", total, min(avail, total))}, nil
}

// appleWorkingSet approximates Metal's recommendedMaxWorkingSetSize for a
// machine with ram bytes and the iogpu.wired_limit_mb setting (0 = unset).
func appleWorkingSet(ram, wiredLimitMB uint64) uint64 {
	if wiredLimitMB > 0 && wiredLimitMB < ram>>20 {
		return wiredLimitMB << 20
	}
	if ram <= 36<<30 {
		return ram / 3 * 2
	}
	return ram / 4 * 3
}

// availableRAM is the memory the system can hand out without swapping.
func availableRAM(ctx context.Context) (uint64, error) {
	v, err := mem.VirtualMemoryWithContext(ctx)
	if err != nil {
		return 0, err
	}
	return v.Available, nil
}
