package gpu

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeRunner answers for a command line with out and err, and records the
// lines it was asked to run.
type fakeRunner struct {
	out   string
	err   error
	lines []string
}

func (r *fakeRunner) run(_ context.Context, name string, args ...string) ([]byte, error) {
	r.lines = append(r.lines, strings.Join(append([]string{name}, args...), " "))
	return []byte(r.out), r.err
}

// AMD memory through the driver's sysfs files (ROCm's own
// source), skipping integrated GPUs, connectors and render nodes.
func TestAMDThroughSysfs(t *testing.T) {
	r := &fakeRunner{err: errors.New("rocm-smi must not run when sysfs answers")}
	p := NewAMD(os.DirFS("testdata/amd/two-gpus"), r.run)
	got, err := p.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{
		{Vendor: "amd", Name: "AMD Radeon RX 7900 XTX", Total: 25753026560, Used: 1620049920, Free: 25753026560 - 1620049920},
		{Vendor: "amd", Name: "AMD GPU (card2)", Total: 17163091968, Used: 17163091968, Free: 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	if len(r.lines) != 0 {
		t.Errorf("ran %q", r.lines)
	}
}

func TestAMDRocmSMIFallback(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		err     error
		want    []Device
		wantErr bool
	}{
		{
			name: "two cards",
			out: `{"card1": {"VRAM Total Memory (B)": "68702699520", "VRAM Total Used Memory (B)": "10485760"},
			        "card0": {"VRAM Total Memory (B)": "34342961152", "VRAM Total Used Memory (B)": "7028736"},
			        "system": {"Driver version": "6.7.0"}}`,
			want: []Device{
				{Vendor: "amd", Name: "AMD GPU (card0)", Total: 34342961152, Used: 7028736, Free: 34342961152 - 7028736},
				{Vendor: "amd", Name: "AMD GPU (card1)", Total: 68702699520, Used: 10485760, Free: 68702699520 - 10485760},
			},
		},
		{name: "numbers instead of strings", out: `{"card0": {"VRAM Total Memory (B)": 34342961152, "VRAM Total Used Memory (B)": 0}}`,
			want: []Device{{Vendor: "amd", Name: "AMD GPU (card0)", Total: 34342961152, Free: 34342961152}}},
		{name: "not installed", err: errors.New(`exec: "rocm-smi": executable file not found in $PATH`), wantErr: true},
		{name: "not JSON", out: "ERROR: GPU[0] : Unable to read", wantErr: true},
		{name: "no memory fields", out: `{"card0": {"GPU use (%)": "0"}}`, wantErr: true},
		{name: "garbage values", out: `{"card0": {"VRAM Total Memory (B)": "lots", "VRAM Total Used Memory (B)": "-1"}}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fakeRunner{out: tt.out, err: tt.err}
			got, err := NewAMD(os.DirFS("testdata/amd/nvidia-only"), r.run).Devices(context.Background())
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr && !errors.Is(err, ErrNoDevice) {
				t.Errorf("err = %v, want ErrNoDevice", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
			if want := []string{"rocm-smi --showmeminfo vram --json"}; !cmp.Equal(want, r.lines) {
				t.Errorf("ran %q, want %q", r.lines, want)
			}
		})
	}
}

func TestAMDNoSysfs(t *testing.T) {
	r := &fakeRunner{err: errors.New("not found")}
	_, err := NewAMD(os.DirFS(t.TempDir()), r.run).Devices(context.Background())
	if !errors.Is(err, ErrNoDevice) {
		t.Errorf("err = %v, want ErrNoDevice", err)
	}
}
