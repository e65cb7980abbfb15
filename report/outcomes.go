package report

import (
	"fmt"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// The one-line answers of the context commands, the same from the CLI,
// the REPL and the in-band commands.

// SnapshotSaved is the answer of a snapshot taken.
func SnapshotSaved(s adminapi.SnapshotInfo) string {
	return fmt.Sprintf("Saved snapshot %s (%s, %s tokens).", Clean(s.ID), Plural(s.Messages, "message"), Grouped(s.Tokens))
}

// SnapshotRestored is the answer of a snapshot restored.
func SnapshotRestored(id string, messages int) string {
	return fmt.Sprintf("Restored snapshot %s: %s.", Clean(id), Plural(messages, "message"))
}

// Compressed is the answer of a compress that cut something: the counts,
// then what the strategy did.
func Compressed(r adminapi.Compressed) string {
	if r.Dropped == 0 && r.Summarized == 0 && r.Before == r.After && r.Notice != "" {
		// Nothing was done: the notice says why, and no counts claim
		// otherwise.
		return Clean(r.Notice)
	}
	verb := "Compressed"
	if r.DryRun {
		verb = "Would compress"
	}
	line := fmt.Sprintf(verb+": %s → %s tokens (%s dropped, %s summarized).", Grouped(r.Before),
		Grouped(r.After), Plural(r.Dropped, "message"), Grouped(r.Summarized))
	if r.Notice != "" {
		line += "\n" + Clean(r.Notice)
	}
	return line
}

// ContextSize is the answer of a context size shown or set.
func ContextSize(cs adminapi.ContextSize) string {
	if !cs.Auto {
		return fmt.Sprintf("Context size: %s tokens (auto sizing off).", Grouped(cs.Target))
	}
	line := "Context size: auto, from free VRAM"
	if cs.Target > 0 {
		line += " (" + Grouped(cs.Target) + " tokens now)"
	}
	return line + "."
}

// UndoHint says how to go back after a command replaced the context
// (ctxproxy saved it first as snapshot id); restore is the command that
// does it, e.g. "/context restore ID".
func UndoHint(id, restore string) string {
	return fmt.Sprintf("The context it replaced is snapshot %s: %s undoes this.", Clean(id), restore)
}
