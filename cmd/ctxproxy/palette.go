package main

import (
	"fmt"
	"strconv"
)

// palette paints text when colors are on.
type palette struct{ on bool }

func (p palette) paint(color, s string) string {
	if !p.on || s == "" {
		return s
	}
	return color + s + colorReset
}

// warning is a seed 000 capacity warning: yellow at 80%, orange at 90%.
func (p palette) warning(text string) string {
	return p.paint(warningColor(text), "⚠ "+clean(text))
}

// notice is what ctxproxy did, e.g. seed 000's "Context trimmed. Kept
// first 2 and last 10 turns." (info).
func (p palette) notice(text string) string {
	return p.paint(colorCyan, "ℹ "+clean(text))
}

func (p palette) error(text string) string {
	return p.paint(colorRed, "error: "+clean(text))
}

// warningColor picks a warning's color from the capacity it names
// ("Context at 90% capacity. ..."): ctxproxy's thresholds are
// configurable, so the level is read from the text, not assumed.
func warningColor(text string) string {
	if percentIn(text) >= 90 {
		return colorOrange
	}
	return colorYellow
}

// usageColor is warningColor for a usage fraction.
func usageColor(usage float64) string {
	if usage >= 0.9 {
		return colorOrange
	}
	return colorYellow
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

// warnAt is the usage from which the status shows its warning indicator:
// seed 000 warns when usage reaches 80%, seed 004 R9.7 when it exceeds it.
const warnAt = 0.80

// useColor decides whether to color output: --color always or never
// decides; auto colors a terminal unless NO_COLOR is set
// (https://no-color.org: a command-line flag overrides NO_COLOR).
func useColor(mode, noColor string, terminal bool) (bool, error) {
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
