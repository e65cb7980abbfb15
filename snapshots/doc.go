// Package snapshots keeps session state and snapshot history: a file store
// (the default) and a Redis store shared by replicas, with atomic,
// checksummed, compressed writes off the request path.
package snapshots
