//go:build !unix

package server

// inlineSupported: no non-blocking raw socket write here (syscall.Write
// takes a Handle on Windows), so startInline leaves every stream to its
// goroutine, as with worker.inlineDeliveries 0.
const inlineSupported = false

// rawWrite is never called: startInline parks no stream here.
func (st *subStream) rawWrite(uintptr) {}
