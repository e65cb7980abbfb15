package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

// activeWindow is how recently a session must have been used to count as
// active when the memory guard reaches its emergency level.
const activeWindow = 10 * time.Minute

// memoryGuard acts on the memory monitor's levels (docs/how-it-works.md, "The memory guard"): at the
// emergency level it snapshots and clears every active session.
type memoryGuard struct {
	sessions *sessions.Service
	// trackers say which sessions are active.
	trackers *sessions.Trackers
	log      *slog.Logger
}

// onEvent is the memory guard's hook (gpu.Monitor.Subscribe). At the
// emergency level (95% of memory used) every active session
// is snapshotted and cleared, and told how to restore itself. The lower
// levels act on the request path: compress earlier (80%) and a smaller
// num_ctx (90%, in the sizer).
func (g *memoryGuard) onEvent(e gpu.Event) {
	if e.Level != e.Prev {
		g.log.Warn("memory guard level changed", "from", e.Prev.String(), "to", e.Level.String(),
			"used", e.Snapshot.Used(), "total", e.Snapshot.Total())
	}
	if e.Level < gpu.LevelEmergency || e.Prev >= gpu.LevelEmergency || g.sessions.Store == nil || g.sessions.Writer == nil {
		return
	}
	go g.emergency()
}

func (g *memoryGuard) emergency() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The snapshot is read from the store: write the turns still queued
	// first, or the clear below would lose them.
	if err := g.sessions.Writer.Flush(ctx); err != nil {
		g.log.Warn("memory emergency: queued session writes not flushed; snapshots may miss the newest turns", "err", err)
	}
	for _, id := range g.trackers.Active(activeWindow) {
		// The same clear as DELETE /ctxproxy/sessions/{id}, snapshotted
		// first under its own reason.
		undo, err := g.sessions.Clear(ctx, id, false, snapshots.ReasonEmergency)
		if err != nil {
			g.log.Error("memory emergency: session not cleared", "session", id, "err", err)
			continue
		}
		if undo.ID == "" {
			continue // nothing to clear
		}
		g.sessions.Cleared.Set(id, undo.ID)
		g.log.Warn("memory emergency: session saved and cleared", "session", id, "snapshot", undo.ID)
	}
}

// emergencyWarning is what a session's client is told after the guard
// cleared it.
func emergencyWarning(session, snap string) string {
	return fmt.Sprintf("GPU memory reached the emergency level: ctxproxy saved this session as snapshot %s and cleared it. "+
		"Restore it with: ctxproxy context restore %s --session %q", snap, snap, session)
}
