//go:build e2e

package e2e

import "os"

// visionCases returns the image cases a vision test runs: all of them
// with CTXPROXY_E2E_VISION=all (scripts/vision.sh), else the
// representative ones at the indexes ci, so that CI checks each family's
// rule on the real server without running every size through a vision
// tower on the CPU.
func visionCases[T any](all []T, ci ...int) []T {
	if os.Getenv("CTXPROXY_E2E_VISION") == "all" {
		return all
	}
	out := make([]T, 0, len(ci))
	for _, i := range ci {
		out = append(out, all[i])
	}
	return out
}
