//go:build !unix

package proxy

import "net"

// open cannot look at a pooled connection here: it is taken as open.
func open(net.Conn) bool { return true }
