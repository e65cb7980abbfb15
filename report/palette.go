package report

import (
	"fmt"
	"strconv"
)

// The terminal colors: the 80% warning is yellow and the 90% one orange,
// which the 16 basic colors do not have (Orange is the
// 256-color one).
const (
	Yellow = "\x1b[33m"
	Orange = "\x1b[38;5;208m"
	Cyan   = "\x1b[36m"
	Red    = "\x1b[31m"
	Dim    = "\x1b[2m"
	Reset  = "\x1b[0m"
)

// WarnAt is the usage from which a status shows its warning indicator: at
// 80% and above, as the capacity warning itself (X-Ctxproxy-Warning).
const WarnAt = 0.80

// Palette paints text when On; the zero Palette writes plain text (the
// in-band replies, a pipe, NO_COLOR).
type Palette struct{ On bool }

// Paint wraps s in color when the palette is on.
func (p Palette) Paint(color, s string) string {
	if !p.On || s == "" {
		return s
	}
	return color + s + Reset
}

// Warning is a capacity warning: yellow at 80%, orange at 90%.
func (p Palette) Warning(text string) string {
	return p.Paint(warningColor(text), "⚠ "+Clean(text))
}

// Notice is what ctxproxy did, e.g. "Context trimmed. Kept
// first 2 and last 10 messages." (info).
func (p Palette) Notice(text string) string {
	return p.Paint(Cyan, "ℹ "+Clean(text))
}

// Error is an error line.
func (p Palette) Error(text string) string {
	return p.Paint(Red, "error: "+Clean(text))
}

// warningColor picks a warning's color from the capacity it names
// ("Context at 90% capacity. ..."): ctxproxy's thresholds are
// configurable, so the level is read from the text, not assumed.
func warningColor(text string) string {
	if percentIn(text) >= 90 {
		return Orange
	}
	return Yellow
}

// UsageColor is the warning color for a usage fraction.
func UsageColor(usage float64) string {
	if usage >= 0.9 {
		return Orange
	}
	return Yellow
}

// percentIn returns the first whole number directly followed by "%" in
// s, or -1.
func percentIn(s string) int {
	for i := 0; i < len(s); i++ {
		j := i
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if j > i && j < len(s) && s[j] == '%' {
			n, err := strconv.Atoi(s[i:j])
			if err == nil {
				return n
			}
		}
		if j > i {
			i = j
		}
	}
	return -1
}

// UseColor decides whether to color output: --color always or never
// decides; auto colors a terminal unless NO_COLOR is set
// (https://no-color.org: a command-line flag overrides NO_COLOR).
func UseColor(mode, noColor string, terminal bool) (bool, error) {
	switch mode {
	case "always":
		return true, nil
	case "never":
		return false, nil
	case "auto", "":
		return terminal && noColor == "", nil
	}
	return false, fmt.Errorf("--color %q: want auto, always or never", mode)
}
