package gpu

import "fmt"

// Level is the memory guard's judgement of device memory.
type Level int

// Levels, from calm to critical. Each asks more of the proxy.
const (
	// LevelNormal: nothing to do.
	LevelNormal Level = iota
	// LevelCompress: compress earlier, by lowering the strategy threshold.
	LevelCompress
	// LevelShrink: num_ctx steps down one bucket; the
	// Sizer does this by itself.
	LevelShrink
	// LevelEmergency: snapshot and clear the active sessions and tell the
	// user how to restore them.
	LevelEmergency
)

func (l Level) String() string {
	switch l {
	case LevelNormal:
		return "normal"
	case LevelCompress:
		return "compress"
	case LevelShrink:
		return "shrink"
	case LevelEmergency:
		return "emergency"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// guardRelease is how far below its threshold usage must fall before a
// level is left. Device usage wobbles by a few hundred MiB as other
// processes come and go; without this band a reading hovering at 90% would
// switch the shrink level on and off every sample, and each switch reloads
// the model.
const guardRelease = 0.02

// Guard turns memory usage into a Level, with hysteresis: a level is
// entered when usage reaches its threshold and left only when usage falls
// guardRelease below it. A Guard is not safe for concurrent use; the
// Monitor owns one and publishes its level in each Reading.
type Guard struct {
	cfg   GuardConfig
	level Level
}

// NewGuard returns a guard at LevelNormal. Zero thresholds mean the
// defaults (0.80, 0.90, 0.95).
func NewGuard(cfg GuardConfig) *Guard {
	return &Guard{cfg: cfg.withDefaults()}
}

// Level returns the current level.
func (g *Guard) Level() Level { return g.level }

// Observe takes a usage in [0, 1] and returns the level after it.
func (g *Guard) Observe(usage float64) Level {
	thresholds := [...]float64{LevelCompress: g.cfg.CompressAt, LevelShrink: g.cfg.ShrinkAt, LevelEmergency: g.cfg.EmergencyAt}
	enter := LevelNormal
	for l := LevelCompress; l <= LevelEmergency; l++ {
		if usage >= thresholds[l] {
			enter = l
		}
	}
	if enter >= g.level {
		g.level = enter
		return g.level
	}
	// Going down: stay at the highest level whose release point usage
	// has not yet fallen below.
	stay := LevelNormal
	for l := LevelCompress; l <= g.level; l++ {
		if usage >= thresholds[l]-guardRelease {
			stay = l
		}
	}
	g.level = stay
	return g.level
}
