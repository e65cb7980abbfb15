package gpu

import (
	"context"
	"errors"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeSysctl answers from a map; missing names are errors.
type fakeSysctl struct {
	uints   map[string]uint64
	strings map[string]string
}

func (f fakeSysctl) Uint(name string) (uint64, error) {
	v, ok := f.uints[name]
	if !ok {
		return 0, errors.New("unknown oid")
	}
	return v, nil
}

func (f fakeSysctl) String(name string) (string, error) {
	v, ok := f.strings[name]
	if !ok {
		return "", errors.New("unknown oid")
	}
	return v, nil
}

func TestAppleWorkingSet(t *testing.T) {
	tests := []struct {
		name    string
		ram     uint64
		limitMB uint64
		want    uint64
	}{
		{"16 GiB: two thirds", 16 * gb, 0, 16 * gb / 3 * 2},
		{"36 GiB: two thirds", 36 * gb, 0, 24 * gb},
		{"64 GiB: three quarters", 64 * gb, 0, 48 * gb},
		{"128 GiB: three quarters", 128 * gb, 0, 96 * gb},
		{"wired limit set", 64 * gb, 57344, 56 * gb},
		{"wired limit above RAM is ignored", 16 * gb, 32768, 16 * gb / 3 * 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := appleWorkingSet(tt.ram, tt.limitMB); got != tt.want {
				t.Errorf("appleWorkingSet = %d, want %d", got, tt.want)
			}
		})
	}
}

// Apple Silicon memory through system calls (sysctl), the
// GPU's share of unified memory.
func TestAppleSiliconThroughSysctl(t *testing.T) {
	tests := []struct {
		name      string
		sysctl    fakeSysctl
		available uint64
		want      []Device
		wantErr   bool
	}{
		{
			name: "32 GiB MacBook, plenty free",
			sysctl: fakeSysctl{
				uints:   map[string]uint64{"hw.memsize": 32 * gb, "iogpu.wired_limit_mb": 0},
				strings: map[string]string{"machdep.cpu.brand_string": "Apple M2 Pro"},
			},
			available: 25 * gb,
			want: []Device{{Vendor: "apple", Name: "Apple M2 Pro (unified memory)",
				Total: 32 * gb / 3 * 2, Used: 0, Free: 32 * gb / 3 * 2}},
		},
		{
			name: "64 GiB Mac Studio with the wired limit raised, memory in use",
			sysctl: fakeSysctl{
				uints:   map[string]uint64{"hw.memsize": 64 * gb, "iogpu.wired_limit_mb": 56 * 1024},
				strings: map[string]string{"machdep.cpu.brand_string": "Apple M1 Max"},
			},
			available: 20 * gb,
			want: []Device{{Vendor: "apple", Name: "Apple M1 Max (unified memory)",
				Total: 56 * gb, Used: 36 * gb, Free: 20 * gb}},
		},
		{
			name:      "older macOS without iogpu or brand",
			sysctl:    fakeSysctl{uints: map[string]uint64{"hw.memsize": 8 * gb}},
			available: 2 * gb,
			want: []Device{{Vendor: "apple", Name: "Apple Silicon (unified memory)",
				Total: 8 * gb / 3 * 2, Used: 8*gb/3*2 - 2*gb, Free: 2 * gb}},
		},
		{name: "no hw.memsize", sysctl: fakeSysctl{}, wantErr: true},
		{name: "hw.memsize 0", sysctl: fakeSysctl{uints: map[string]uint64{"hw.memsize": 0}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newApple(tt.sysctl, func(context.Context) (uint64, error) { return tt.available, nil })
			got, err := p.Devices(context.Background())
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOpenAppleElsewhere(t *testing.T) {
	if runtime.GOOS == "darwin" && runtime.GOARCH == "arm64" {
		t.Skip("this is Apple Silicon")
	}
	if _, err := OpenApple(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("OpenApple on %s/%s = %v, want ErrUnavailable", runtime.GOOS, runtime.GOARCH, err)
	}
}
