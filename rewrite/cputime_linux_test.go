package rewrite

import (
	"runtime"
	"syscall"
	"time"
)

// threadCPU returns the CPU time the calling OS thread has used. With the
// goroutine locked to its thread, it measures a benchmark loop without the
// time the thread waited for a core, which on a shared machine dwarfs the
// work itself.
func threadCPU() (time.Duration, bool) {
	const rusageThread = 1 // RUSAGE_THREAD
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

func lockThread() func() {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
