//go:build cgo && linux

package gpu

import (
	"context"
	"errors"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/google/go-cmp/cmp"
)

// dgx returns go-nvml's mock DGX A100 (8 × 40 GiB) with GPU i having
// (i+1) GiB in use; v1 and v2 memory info report the same figures unless
// v2 is changed.
func dgx() *dgxa100.Server {
	s := dgxa100.New()
	for i, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		used := uint64(i+1) * gb
		dev.MemoryInfo = nvml.Memory{Total: dev.MemoryInfo.Total, Used: used, Free: dev.MemoryInfo.Total - used}
		dev.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
			m := dev.MemoryInfo
			return nvml.Memory_v2{Total: m.Total, Reserved: 300 * mib, Used: m.Used - 300*mib, Free: m.Free}, nvml.SUCCESS
		}
	}
	return s
}

func wantDGX() []Device {
	var want []Device
	for i := range 8 {
		want = append(want, Device{Vendor: "nvidia", Name: "Mock NVIDIA A100-SXM4-40GB",
			Total: 40 * gb, Used: uint64(i+1) * gb, Free: 40*gb - uint64(i+1)*gb})
	}
	return want
}

// NVIDIA memory through NVML.
func TestNVIDIAThroughNVML(t *testing.T) {
	s := dgx()
	p, err := openNVIDIA(s)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !p.memoryV2 {
		t.Error("memory info v2 not used though the symbol is there")
	}
	got, err := p.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantDGX(), got); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	if p.Name() != "nvidia" {
		t.Errorf("Name() = %q", p.Name())
	}
}

func TestNVIDIAMemoryInfoFallback(t *testing.T) {
	tests := []struct {
		name  string
		setup func(s *dgxa100.Server)
	}{
		{"old driver without the v2 symbol", func(s *dgxa100.Server) {
			s.LookupSymbolFunc = func(sym string) error {
				if sym == "nvmlDeviceGetMemoryInfo_v2" {
					return errors.New("undefined symbol")
				}
				return nil
			}
			// Calling v2 now would panic in the mock, as the missing
			// symbol would crash the real library.
			for _, d := range s.Devices {
				d.(*dgxa100.Device).GetMemoryInfo_v2Func = nil
			}
		}},
		{"v2 not supported", func(s *dgxa100.Server) {
			for _, d := range s.Devices {
				d.(*dgxa100.Device).GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
					return nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := dgx()
			tt.setup(s)
			p, err := openNVIDIA(s)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			for range 2 {
				got, err := p.Devices(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(wantDGX(), got); diff != "" {
					t.Errorf("devices (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// After a failed Init nothing else may be called: every other method of
// this mock panics when called.
func TestNVIDIAInitFailureCallsNothingElse(t *testing.T) {
	for _, ret := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_NO_PERMISSION} {
		t.Run(ret.String(), func(t *testing.T) {
			lib := &mock.Interface{InitFunc: func() nvml.Return { return ret }}
			p, err := openNVIDIA(lib)
			if !errors.Is(err, ErrUnavailable) || p != nil {
				t.Errorf("openNVIDIA = %v, %v; want nil, ErrUnavailable", p, err)
			}
			if n := len(lib.InitCalls()); n != 1 {
				t.Errorf("Init called %d times", n)
			}
		})
	}
}

func TestNVIDIANoGPU(t *testing.T) {
	s := dgx()
	s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.SUCCESS }
	p, err := openNVIDIA(s)
	if !errors.Is(err, ErrUnavailable) || p != nil {
		t.Errorf("openNVIDIA = %v, %v; want nil, ErrUnavailable", p, err)
	}
	if n := len(s.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times after a successful Init, want 1", n)
	}
}

func TestNVIDIACloseOnce(t *testing.T) {
	s := dgx()
	p, err := openNVIDIA(s)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}
	counts := len(s.DeviceGetCountCalls())
	if _, err := p.Devices(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Devices after Close = %v, want ErrClosed", err)
	}
	if len(s.DeviceGetCountCalls()) != counts {
		t.Error("Devices after Close called into NVML")
	}
}

func TestNVIDIADeviceErrors(t *testing.T) {
	s := dgx()
	p, err := openNVIDIA(s)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	d := s.Devices[3].(*dgxa100.Device)
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_GPU_IS_LOST }
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
	if _, err := p.Devices(context.Background()); err == nil {
		t.Error("Devices with a lost GPU: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Devices(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Devices(cancelled) = %v", err)
	}
}

// The real library on this machine: without an NVIDIA driver it must fail
// cleanly, not crash.
func TestOpenNVIDIAReal(t *testing.T) {
	p, err := OpenNVIDIA()
	if err != nil {
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("OpenNVIDIA error %v does not wrap ErrUnavailable", err)
		}
		t.Logf("no NVIDIA GPU here: %v", err)
		return
	}
	defer p.Close()
	devices, err := p.Devices(context.Background())
	t.Logf("NVIDIA devices: %+v, %v", devices, err)
}
