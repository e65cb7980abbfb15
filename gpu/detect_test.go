package gpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// fakeOpener returns an opener that succeeds with a probe of that name, or
// fails with err; a probe whose sampling fails is made with sampleErr.
func fakeOpener(name string, err, sampleErr error, opened map[string]*fakeProbe) opener {
	return opener{name, func(context.Context) (Probe, error) {
		if err != nil {
			return nil, err
		}
		p := &namedProbe{fakeProbe: &fakeProbe{}, name: name}
		p.set(10*gb, sampleErr)
		opened[name] = p.fakeProbe
		return p, nil
	}}
}

type namedProbe struct {
	*fakeProbe
	name string
}

func (p *namedProbe) Name() string { return p.name }

var errNone = fmt.Errorf("%w: none here", ErrUnavailable)

// At start the monitor detects NVIDIA, AMD, Apple Silicon or CPU-only, in
// that order, and logs why it skipped the others (at debug level).
func TestDetectTriesNVIDIAThenAMDThenAppleThenCPU(t *testing.T) {
	type setup struct{ nvidia, amd, apple, amdSample error }
	tests := []struct {
		name     string
		want     string // probe name chosen, "" for an error
		probe    string // config gpu.probe
		setup    setup
		wantLogs []string
	}{
		{name: "nvidia first", want: "nvidia"},
		{name: "then amd", want: "amd", setup: setup{nvidia: errNone},
			wantLogs: []string{"probe=amd", `skipped" probe=nvidia`}},
		{name: "then apple", want: "apple", setup: setup{nvidia: errNone, amd: errNone}},
		{name: "cpu fallback", want: "cpu", setup: setup{nvidia: errNone, amd: errNone, apple: errNone},
			wantLogs: []string{"probe=cpu", `skipped" probe=nvidia reason="gpu: probe unavailable: none here"`, `skipped" probe=amd`, `skipped" probe=apple`}},
		{name: "a probe that cannot sample is skipped", want: "apple", setup: setup{nvidia: errNone, amdSample: errors.New("no card")},
			wantLogs: []string{`skipped" probe=amd reason="gpu: probe unavailable: sample: no card"`}},
		{name: "named probe", probe: "cpu", want: "cpu"},
		{name: "named probe unavailable is an error", probe: "amd", setup: setup{amd: errNone}},
		{name: "unknown probe is an error", probe: "tpu"},
		{name: "empty means auto", probe: "", want: "nvidia"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opened := map[string]*fakeProbe{}
			openers := []opener{
				fakeOpener("nvidia", tt.setup.nvidia, nil, opened),
				fakeOpener("amd", tt.setup.amd, tt.setup.amdSample, opened),
				fakeOpener("apple", tt.setup.apple, nil, opened),
				fakeOpener("cpu", nil, nil, opened),
			}
			var logs bytes.Buffer
			// Why the others were skipped is at debug level: on a machine
			// without a GPU, info shows one line, not a list of errors.
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			p, err := detect(context.Background(), tt.probe, log, openers)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("detect = %s, want an error", p.Name())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Name() != tt.want {
				t.Errorf("chose %s, want %s", p.Name(), tt.want)
			}
			for _, want := range append(tt.wantLogs, "gpu: memory probe chosen") {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("log %q lacks %q", logs.String(), want)
				}
			}
			for name, fp := range opened {
				if name != tt.want && !fp.closed {
					t.Errorf("probe %s was opened, not chosen and not closed", name)
				}
			}
		})
	}
}

func TestDetectRecoversFromPanic(t *testing.T) {
	openers := []opener{
		{"nvidia", func(context.Context) (Probe, error) { panic("driver bug") }},
		{"cpu", func(context.Context) (Probe, error) {
			return &namedProbe{&fakeProbe{devices: []Device{{Total: 1}}}, "cpu"}, nil
		}},
	}
	p, err := detect(context.Background(), "auto", nil, openers)
	if err != nil || p.Name() != "cpu" {
		t.Errorf("detect = %v, %v; want cpu", p, err)
	}
}

// CPU-only detection on this machine, which has no NVIDIA library: Detect
// starts, logs the fallback and does not crash.
func TestDetectRealMachine(t *testing.T) {
	var logs bytes.Buffer
	p, err := Detect(context.Background(), Config{}, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	t.Logf("chose %s: %s", p.Name(), logs.String())
	if p.Name() == "cpu" && !strings.Contains(logs.String(), `skipped" probe=nvidia`) {
		t.Errorf("fell back to cpu without saying why nvidia was skipped: %s", logs.String())
	}
	devices, err := p.Devices(context.Background())
	if err != nil || len(devices) == 0 {
		t.Errorf("Devices = %v, %v", devices, err)
	}
}
