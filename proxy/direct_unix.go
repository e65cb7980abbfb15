//go:build unix

package proxy

import (
	"errors"
	"net"
	"syscall"
)

// open reports whether a pooled connection is still open and quiet: a
// peek that does not wait finds nothing to read. A backend that closed
// it while it sat in the pool (Ollama drops idle connections) has sent
// its end of stream, which the peek finds at once, so no request is
// written into a closed connection.
func open(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	quiet := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, perr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		quiet = errors.Is(perr, syscall.EAGAIN) || errors.Is(perr, syscall.EWOULDBLOCK)
		return true // never wait for the connection to be readable
	})
	return err == nil && quiet
}
