//go:build linux

package server

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/smssmq/smss/protocol"
)

// The epoll loop is on by default (server.epoll), so every byte stream a
// client may send must get from it exactly the replies the goroutine path
// gives. TestEpollRepliesAsGoroutines holds the cases one by one; this test
// sends the same random streams (publishes of every size, including ones
// the loop must hold across reads or hand back for being over 64 KiB,
// business errors, refusals, other commands, a stream ending mid-request),
// cut into random pieces with random pauses, to a server with the loop
// (taking connections from the first) and one without, and compares the
// reply bytes up to the server's close. SMSS_EPOLL_SEED=N repeats a run.
func TestEpollRandomStreamsMatchGoroutines(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SMSS_EPOLL_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SMSS_EPOLL_SEED: %v", err)
		}
		seed = n
	}
	t.Logf("seed %d (SMSS_EPOLL_SEED=%d repeats this run)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	on := startServer(t, topicsBackend(t), func(o *Options) { o.Epoll, o.EpollMinConns = true, 0 })
	off := startServer(t, topicsBackend(t), func(o *Options) { o.Epoll = false })
	if on.ep == nil || off.ep != nil {
		t.Fatal("want the loop in one server only")
	}
	const streams = 120
	for i := range streams {
		stream, what := randomStream(rng)
		cuts := randomCuts(rng, len(stream))
		pauses := rng.Uint64()
		got := exchangeStream(t, on, stream, cuts, pauses)
		want := exchangeStream(t, off, stream, cuts, pauses)
		if !bytes.Equal(got, want) {
			t.Fatalf("stream %d (%s), cut at %v:\nloop replied      %q\ngoroutine replied %q", i, what, cuts, clip(got), clip(want))
		}
	}
	served, handed := on.loopCounts()
	t.Logf("%d streams: the loop served %d publishes and handed back %d connections", streams, served, handed)
	if served == 0 || handed == 0 {
		t.Fatalf("the loop served %d publishes and handed back %d connections: the streams did not reach it", served, handed)
	}
}

// randomStream returns up to 8 requests and what they are.
func randomStream(rng *rand.Rand) ([]byte, string) {
	var b []byte
	var what []string
	n := 1 + rng.IntN(8)
	for range n {
		switch k := rng.IntN(20); {
		case k < 10: // a publish of 1-3 small records
			recs := make([][]byte, 1+rng.IntN(3))
			for j := range recs {
				recs[j] = bigRecord(1 + rng.IntN(300))
			}
			b = append(b, pubReq([]string{"t", "u"}[rng.IntN(2)], recs...)...)
			what = append(what, "pub")
		case k < 12: // long: held across reads, or over 64 KiB and handed back
			b = append(b, pubReq("t", bigRecord(8<<10+rng.IntN(90<<10)))...)
			what = append(what, "long pub")
		case k < 14:
			b = append(b, aliveReq()...)
			what = append(what, "alive")
		case k < 16: // a business error: the connection goes on
			b = append(b, pubReq("nope", record("x"))...)
			what = append(what, "pub to a missing topic")
		case k < 17: // refused by the request reader
			b = append(b, enc(protocol.AppendPub(nil, []byte("t"), []byte("tid"), []byte("not records")))...)
			what = append(what, "bad records")
		case k < 18: // an unknown command
			hdr := make([]byte, protocol.HeaderSize)
			hdr[0] = 0xEE
			b = append(b, hdr...)
			what = append(what, "unknown command")
		case k < 19: // the stream ends inside a request
			p := pubReq("t", record("cut"))
			return append(b, p[:1+rng.IntN(len(p)-1)]...), fmt.Sprint(append(what, "cut pub"))
		default: // a publish with a trace id
			b = append(b, enc(protocol.AppendPub(nil, []byte("u"), []byte("trace-1"), record("traced")))...)
			what = append(what, "traced pub")
		}
	}
	return b, fmt.Sprint(what)
}

// randomCuts splits n bytes into up to 6 pieces.
func randomCuts(rng *rand.Rand, n int) []int {
	var cuts []int
	for range rng.IntN(6) {
		cuts = append(cuts, rng.IntN(n+1))
	}
	return cuts
}

// exchangeStream writes stream in the pieces cuts make (sorted), pausing
// after some (bits of pauses), half-closes, and returns every reply byte up
// to the server's close.
func exchangeStream(t *testing.T, ts *testServer, stream []byte, cuts []int, pauses uint64) []byte {
	t.Helper()
	c := ts.dial(t)
	sorted := append([]int(nil), cuts...)
	for i := range sorted { // insertion sort: a handful
		for j := i; j > 0 && sorted[j] < sorted[j-1]; j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	done := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(c) // the deadline of dial ends a hang
		done <- b
	}()
	prev := 0
	for i, cut := range append(sorted, len(stream)) {
		if cut > prev {
			if _, err := c.Write(stream[prev:cut]); err != nil {
				break // the server closed after a refusal: the rest is not read
			}
			prev = cut
		}
		if pauses>>(i%64)&1 == 1 {
			// Shapes the input (a piece arriving in a later turn), not a
			// wait for a condition.
			time.Sleep(300 * time.Microsecond)
		}
	}
	c.(*net.TCPConn).CloseWrite()
	return <-done
}

func clip(b []byte) []byte {
	if len(b) > 400 {
		return append(append([]byte(nil), b[:400]...), "..."...)
	}
	return b
}
