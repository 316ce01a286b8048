//go:build unix

package server

import (
	"syscall"

	"github.com/smssmq/smss/internal/rawsys"
)

// inlineSupported: commit hooks write frames themselves (rawWrite); on
// other systems the stream goroutine writes every frame, as with
// worker.inlineDeliveries 0 (subinline_other.go).
const inlineSupported = true

func (st *subStream) rawWrite(fd uintptr) {
	in, b := &st.in, st.c.out
	for in.wn < len(b) {
		k, err := rawsys.WriteFd(int(fd), b[in.wn:])
		if k > 0 {
			in.wn += k
		}
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return
		case err != nil:
			in.werr = err
			return
		case k <= 0:
			in.werr = errNoProgress
			return
		}
	}
}
