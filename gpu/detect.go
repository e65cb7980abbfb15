package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// opener opens one probe; an error wrapping ErrUnavailable means "not on
// this machine".
type opener struct {
	name string
	open func(ctx context.Context) (Probe, error)
}

// defaultOpeners are the probes in detection order: a discrete GPU first
// (NVIDIA, then AMD), then Apple's unified memory, then system RAM, which
// always works.
func defaultOpeners() []opener {
	return []opener{
		{ProbeNVIDIA, func(context.Context) (Probe, error) {
			p, err := OpenNVIDIA()
			if err != nil {
				return nil, err
			}
			return p, nil
		}},
		{ProbeAMD, func(context.Context) (Probe, error) { return NewAMD(nil, nil), nil }},
		{ProbeApple, func(context.Context) (Probe, error) {
			p, err := OpenApple()
			if err != nil {
				return nil, err
			}
			return p, nil
		}},
		{ProbeCPU, func(context.Context) (Probe, error) { return NewSystem(nil), nil }},
	}
}

// Detect picks the probe config gpu.probe names. "auto" (or
// "") tries NVIDIA, AMD and Apple in turn and falls back to system RAM
// (CPU-only inference), logging the choice and why each other probe was skipped.
// A named probe that does not work on this machine is an error. Detect
// never panics on a machine without GPU libraries.
func Detect(ctx context.Context, cfg Config, log *slog.Logger) (Probe, error) {
	return detect(ctx, cfg.Probe, log, defaultOpeners())
}

func detect(ctx context.Context, want string, log *slog.Logger, openers []opener) (Probe, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if want == "" {
		want = ProbeAuto
	}
	for _, o := range openers {
		if want != ProbeAuto && want != o.name {
			continue
		}
		p, err := try(ctx, o)
		if err == nil {
			// One line; the probes that did not apply are at debug level,
			// so a machine without a GPU does not start with a list of
			// errors that reads like a failure.
			log.Info("gpu: memory probe chosen", "probe", p.Name())
			return p, nil
		}
		if want != ProbeAuto {
			return nil, fmt.Errorf("gpu: probe %s: %w", want, err)
		}
		log.Debug("gpu: memory probe skipped", "probe", o.name, "reason", err)
	}
	if want != ProbeAuto {
		return nil, fmt.Errorf("gpu: unknown probe %q", want)
	}
	return nil, fmt.Errorf("%w: no probe works on this machine", ErrUnavailable)
}

// try opens a probe and takes one sample, so that a probe is chosen only
// when it can report a device. A panic inside a vendor library is turned
// into an error rather than taking the process down.
func try(ctx context.Context, o opener) (p Probe, err error) {
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, fmt.Errorf("%w: %s probe panicked: %v", ErrUnavailable, o.name, r)
		}
	}()
	p, err = o.open(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := p.Devices(ctx); err != nil {
		p.Close()
		if !errors.Is(err, ErrUnavailable) {
			err = fmt.Errorf("%w: sample: %w", ErrUnavailable, err)
		}
		return nil, err
	}
	return p, nil
}
