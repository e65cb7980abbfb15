// Package snapshots keeps ctxproxy's per-session state and snapshot history
// so that a conversation is never lost: the conversation as last seen, its
// statistics and metadata, cached summaries, and point-in-time snapshots
// that can be listed, restored and deleted. It also keeps the turns of
// clients that send only their newest message (Accumulate), and is what
// /clear, /export and /import work on.
//
// Two stores implement one API: [FileStore] (the default, files under a
// directory, one process) and [RedisStore] (shared by several ctxproxy
// replicas). A session is an append-only log of checksummed records, one
// per change (see log.go), so that storing a turn costs the turn and not
// the conversation; logs are replayed on read and compacted in the
// background. A torn tail (a write a crash interrupted) is cut at the last
// good record; a corrupt record with good ones after it is skipped, a
// copy of the log kept, and the records after it still load
// (logrecover.go).
// FileStore keeps logs open between turns and fsyncs appended records in
// the background, every Config.FsyncInterval (see there for what that
// risks); whole files are fsynced before they are renamed into place.
// Snapshots are gzip-compressed, checksummed JSON (see format.go). A
// corrupt record is reported and set aside; every other record still
// loads.
//
// Saving happens off the request path: the proxy hands session changes and
// snapshots to a [Writer], a bounded queue drained by a few workers and
// flushed on shutdown.
//
// Session ids are opaque client data. They never appear in a path or key:
// records are stored under the SHA-256 of the id and carry the id inside, so
// one session can never be read or written through another's id.
package snapshots
