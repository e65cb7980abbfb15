// Package parallel runs the iterations of a loop on several goroutines:
// the tokenizers' chunks and the messages of a prompt counted at once.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// For runs fn(0..n-1) on up to GOMAXPROCS goroutines and waits.
func For(n int, fn func(i int)) {
	workers := min(n, runtime.GOMAXPROCS(0))
	if workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}
