// Package headless drives Debian's chromium in headless mode for ctxproxy's
// browser tests: it loads a page, lets its scripts run, and returns the
// rendered DOM or a screenshot.
//
// Chromium runs with a fresh profile and without the sandbox (CI runs as
// root, where the sandbox refuses to start), GPU, first-run UI or
// background network traffic, so a test talks only to its own servers.
package headless

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// ErrNoBrowser means no chromium binary was found.
var ErrNoBrowser = errors.New("headless: chromium not found (apt-get install chromium)")

// Find returns the path of the chromium binary: $CHROMIUM when set, else
// the first of chromium, chromium-browser and google-chrome on PATH.
func Find() (string, error) {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoBrowser
}

// Require returns the chromium binary, or skips the test when there is
// none; under CI (the CI environment variable set) a missing browser fails
// the test instead, since .ci/run installs it.
func Require(t testing.TB) string {
	t.Helper()
	bin, err := Find()
	if err == nil {
		return bin
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%v; CI must install it (.ci/run)", err)
	}
	t.Skipf("%v; skipping the browser test", err)
	return ""
}

// Options shape one browser run.
type Options struct {
	// Budget is the virtual time the page's scripts get before the DOM
	// or screenshot is taken (default 5s): timers run, and the clock
	// waits for network requests in flight.
	Budget time.Duration
	// Width and Height are the window size (default 1280×900).
	Width, Height int
	// Dark renders with prefers-color-scheme: dark.
	Dark bool
	// Timeout bounds the whole run (default 90s).
	Timeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.Budget <= 0 {
		o.Budget = 5 * time.Second
	}
	if o.Width <= 0 || o.Height <= 0 {
		o.Width, o.Height = 1280, 900
	}
	if o.Timeout <= 0 {
		o.Timeout = 90 * time.Second
	}
	return o
}

// DumpDOM loads url and returns the DOM as rendered after the scripts ran.
func DumpDOM(ctx context.Context, url string, opts Options) (string, error) {
	out, err := runChromium(ctx, opts, "--dump-dom", url)
	return string(out), err
}

// Screenshot loads url and writes a PNG of the window to file.
func Screenshot(ctx context.Context, url, file string, opts Options) error {
	abs, err := filepath.Abs(file)
	if err != nil {
		return err
	}
	if _, err := runChromium(ctx, opts, "--screenshot="+abs, url); err != nil {
		return err
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return fmt.Errorf("headless: no screenshot: %w", err)
	}
	if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) {
		return fmt.Errorf("headless: %s is not a PNG", abs)
	}
	return nil
}

func runChromium(ctx context.Context, opts Options, args ...string) ([]byte, error) {
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	profile, err := os.MkdirTemp("", "ctxproxy-chromium-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(profile)
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	flags := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--disable-extensions", "--hide-scrollbars", "--mute-audio",
		"--user-data-dir=" + profile,
		fmt.Sprintf("--window-size=%d,%d", opts.Width, opts.Height),
		fmt.Sprintf("--virtual-time-budget=%d", opts.Budget.Milliseconds()),
	}
	if opts.Dark {
		flags = append(flags, "--blink-settings=preferredColorScheme=0", "--force-dark-mode")
	}
	cmd := exec.CommandContext(ctx, bin, append(flags, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Dir = profile
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("headless: %s: %w\n%s", bin, err, tail(stderr.Bytes(), 2000))
	}
	return stdout.Bytes(), nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
