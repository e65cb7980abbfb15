package check

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestMessages(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{NotNegative("tokens.image_tokens", -3), "tokens.image_tokens: -3 is negative"},
		{NotNegative("gpu.poll_idle", -time.Second), "gpu.poll_idle: -1s is negative"},
		{Within("gpu.guard.shrink_at", 1.5, 0, 1), "gpu.guard.shrink_at: 1.5 is not in [0, 1]"},
		{Within("models.m.multiplier", math.NaN(), 0.5, 2), "models.m.multiplier: NaN is not in [0.5, 2]"},
		{OneOf("gpu.probe", "tpu", "auto", "nvidia"), `gpu.probe: "tpu" is not one of auto, nvidia`},
	} {
		if c.err == nil || c.err.Error() != c.want {
			t.Errorf("got %v, want %q", c.err, c.want)
		}
	}
	if err := errors.Join(NotNegative("a", 0), Within("b", 1, 0, 1), OneOf("c", "", "x"), OneOf("d", "x", "x")); err != nil {
		t.Errorf("good values reported: %v", err)
	}
}
