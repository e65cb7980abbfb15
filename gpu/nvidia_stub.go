//go:build !(cgo && linux)

package gpu

import (
	"context"
	"fmt"
)

// NVIDIA measures NVIDIA GPUs through NVML. This build has no cgo or is not
// Linux, so go-nvml cannot load and the probe is never available.
type NVIDIA struct{}

// OpenNVIDIA returns an error wrapping ErrUnavailable: NVML needs cgo on
// Linux.
func OpenNVIDIA() (*NVIDIA, error) {
	return nil, fmt.Errorf("%w: built without cgo on linux, NVML cannot be loaded", ErrUnavailable)
}

// Name returns "nvidia".
func (*NVIDIA) Name() string { return ProbeNVIDIA }

// Devices returns ErrUnavailable.
func (*NVIDIA) Devices(context.Context) ([]Device, error) { return nil, ErrUnavailable }

// Close does nothing.
func (*NVIDIA) Close() error { return nil }
