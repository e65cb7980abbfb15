package gpu

import (
	"context"
	"errors"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// Probe names, as config gpu.probe spells them.
const (
	ProbeAuto   = "auto"
	ProbeNVIDIA = "nvidia"
	ProbeAMD    = "amd"
	ProbeApple  = "apple"
	ProbeCPU    = "cpu"
)

// Errors a probe returns.
var (
	// ErrUnavailable means a probe cannot work on this machine (no driver,
	// no library, no device of its kind). Detect moves on to the next.
	ErrUnavailable = errors.New("gpu: probe unavailable")
	// ErrNoDevice means a probe found no device to report.
	ErrNoDevice = errors.New("gpu: no device")
	// ErrClosed means the probe was closed.
	ErrClosed = errors.New("gpu: probe closed")
)

// Device is the memory of one device, in bytes, Total = Used + Free: the
// shape the status API and "ctxproxy gpu --json" show, declared once in
// package adminapi.
type Device = adminapi.Device

// newDevice builds a Device from total and free, so that Used + Free =
// Total even when a source reports them inconsistently.
func newDevice(vendor, name string, total, free uint64) Device {
	free = min(free, total)
	return Device{Vendor: vendor, Name: name, Total: total, Used: total - free, Free: free}
}

// Probe measures the memory of the devices of one kind.
type Probe interface {
	// Name is the probe's config name ("nvidia", "amd", "apple", "cpu").
	Name() string
	// Devices samples every device now. It may block for a system call or
	// a short command; callers sample off the request path (see Monitor).
	Devices(ctx context.Context) ([]Device, error)
	// Close releases what the probe holds (NVML). It is safe to call more
	// than once.
	Close() error
}
