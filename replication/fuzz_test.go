package replication

import (
	"bufio"
	"bytes"
	"errors"
	"testing"

	"github.com/smssmq/smss/protocol"
)

// FuzzReadFrames feeds arbitrary master output to the slave's frame
// parser: it must never panic, never accept a block over the cap, and end
// with an error at the end of the input.
func FuzzReadFrames(f *testing.F) {
	f.Add(frame(appendixCreate))
	f.Add(append(protocol.AppendReplyAlive(nil), frame(appendixCreate)...))
	f.Add(protocol.AppendReplyError(nil, "EOF"))
	f.Add(append(protocol.AppendReplyOK(nil), 0xff, 0xff, 0xff, 0xff))
	f.Add(protocol.AppendReplySubEnd(nil))
	f.Add(frame(appendixCreate)[:20])
	f.Add(append(protocol.AppendCommitFrame(nil, 12, 3), frame(appendixCreate)...))
	f.Add(protocol.AppendCommitFrame(nil, -1, 0))
	f.Add(protocol.AppendCommitFrame(nil, 5, 0)[:17])
	f.Fuzz(func(t *testing.T, data []byte) {
		// Version 2 sessions read commit frames; version 0 ones stop on
		// them. Odd first bytes pick version 2, known epoch 2.
		v2 := len(data) > 0 && data[0]&1 == 1
		s := &Slave{opts: SlaveOptions{MaxBlock: 4096, KnownEpoch: func() uint64 { return 2 }}, log: quiet, v2: v2}
		br := bufio.NewReader(bytes.NewReader(data))
		b := &batch{}
		for i := 0; ; i++ {
			err := s.readFrame(br, b)
			if err != nil {
				var be *protocol.BizError
				if !errors.Is(err, ErrStopped) && !errors.Is(err, ErrStaleMaster) && !errors.As(err, &be) && br.Buffered() != 0 {
					t.Fatalf("non-protocol error %v with %d bytes unread", err, br.Buffered())
				}
				break
			}
			if i > len(data) {
				t.Fatal("frames without consuming input")
			}
		}
		start := 0
		for _, end := range b.ends {
			if end-start > 4096 {
				t.Fatalf("block of %d bytes over the cap", end-start)
			}
			blockFirstID(b.buf[start:end])
			start = end
		}
	})
}
