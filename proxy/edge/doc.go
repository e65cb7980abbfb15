// Package edge holds what every request meets at ctxproxy's door: the Host
// and Origin checks against DNS rebinding (HostPolicy), the cap on
// requests in flight and on the memory request bodies hold, and the
// minimum rate at which a body must arrive (Gate).
package edge
