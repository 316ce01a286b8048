package main

import (
	"bufio"
	"net"
	"regexp"
	"testing"

	"github.com/smssmq/smss/protocol"
)

// --ids: every request's first record carries a new 32-hex-char message id
// and every body still carries the send time.
func TestPublisherIDs(t *testing.T) {
	for _, records := range []int{1, 3} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		type got struct {
			ids    []string
			stamps []int64
			err    error
		}
		done := make(chan got, 1)
		go func() {
			var g got
			defer func() { done <- g }()
			c, err := ln.Accept()
			if err != nil {
				g.err = err
				return
			}
			defer c.Close()
			rr := protocol.NewRequestReader(bufio.NewReader(c), protocol.DefaultLimits())
			for i := 0; i < 3; i++ {
				var req protocol.Request
				if g.err = rr.Read(&req); g.err != nil {
					return
				}
				id, err := protocol.MessageID(req.Payload)
				if g.err = err; err != nil {
					return
				}
				g.ids = append(g.ids, string(id))
				for rest := req.Payload; len(rest) > 0; {
					var rec []byte
					rec, rest = protocol.NextRecord(rest)
					r, _, err := protocol.ParseRecord(rec)
					if g.err = err; err != nil {
						return
					}
					ts, _ := readStamp(r.Body)
					g.stamps = append(g.stamps, ts)
				}
				if _, g.err = c.Write(protocol.AppendReplyOK(nil)); g.err != nil {
					return
				}
			}
		}()
		p, err := newSmssPub(ln.Addr().String(), "bench", 64, records, true)
		if err != nil {
			t.Fatal(err)
		}
		for i := int64(1); i <= 3; i++ {
			if err := p.publish(i * 1000); err != nil {
				t.Fatal(err)
			}
		}
		p.close()
		g := <-done
		if g.err != nil {
			t.Fatal(g.err)
		}
		hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
		seen := map[string]bool{}
		for _, id := range g.ids {
			if !hex32.MatchString(id) || seen[id] {
				t.Fatalf("records=%d: ids %q: want distinct 32-hex-char ids", records, g.ids)
			}
			seen[id] = true
		}
		if len(g.stamps) != 3*records || g.stamps[0] != 1000 || g.stamps[len(g.stamps)-1] != 3000 {
			t.Fatalf("records=%d: stamps %v", records, g.stamps)
		}
	}
}
