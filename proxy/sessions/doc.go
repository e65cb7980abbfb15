// Package sessions changes stored conversations outside the path of a
// chat request, and holds what the pipeline and the admin API share about
// them: the store and its queued writer as ctxproxy uses them (Store,
// Writer), the operations of the admin API, the in-band commands and the
// memory guard (Service: clear, snapshot, restore, compress, and the
// settling and measuring around an import), the
// messages as the store keeps them (ToStored, FromStored), the mark a
// restore leaves for a client that resends its whole history, the running
// totals of the sessions in use (Trackers), and the sessions the memory
// guard cleared (Cleared).
package sessions
