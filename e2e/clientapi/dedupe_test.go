package clientapi

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smssmq/smss/e2e/internal/kit"
	"github.com/smssmq/smss/protocol"
)

// retryPublisher publishes messages with a message id each and, when the
// connection fails (a timeout, a reset, a server killed before replying),
// reconnects to the current address and sends the same request again,
// within a retry budget, the way an exactly-once client does.
type retryPublisher struct {
	g      int
	topic  string
	addr   *atomic.Pointer[string]
	budget time.Duration

	conn     net.Conn
	connAddr string
	r        *bufio.Reader

	acked   []string // bodies of acknowledged messages
	ackedBy []string // the address that acknowledged each
	givenUp []string // bodies of messages given up on
	retries int
}

func (p *retryPublisher) close() {
	if p.conn != nil {
		p.conn.Close()
		p.conn = nil
	}
}

func (p *retryPublisher) try(req []byte) error {
	if p.conn == nil {
		addr := *p.addr.Load()
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		p.conn, p.r, p.connAddr = c, bufio.NewReader(c), addr
	}
	p.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := p.conn.Write(req); err != nil {
		p.close()
		return err
	}
	if _, err := protocol.ReadReply(p.r, protocol.ReplyPlain, 1<<20); err != nil {
		p.close()
		return err
	}
	return nil
}

// run publishes until stop is closed; the message in flight then is still
// retried to an outcome.
func (p *retryPublisher) run(stop <-chan struct{}, rng *rand.Rand, count *atomic.Int64) {
	defer p.close()
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		n := 1
		if seq%4 == 3 {
			n = 1 + rng.IntN(5)
		}
		id := fmt.Sprintf("g%d-m%d", p.g, seq)
		var payload []byte
		bodies := make([]string, n)
		for i := range bodies {
			bodies[i] = fmt.Sprintf("%s-r%d-%s", id, i, strings.Repeat("x", rng.IntN(40)))
			hs := [][2]string{{"traceId", strconv.Itoa(seq)}}
			if i == 0 {
				hs = [][2]string{{protocol.MsgIDHeader, id}, {"traceId", strconv.Itoa(seq)}}
			}
			payload = append(payload, kit.Record(hs, bodies[i])...)
		}
		req := kit.Must(protocol.AppendPub(nil, []byte(p.topic), nil, payload))
		deadline := time.Now().Add(p.budget)
		for attempt := 0; ; attempt++ {
			err := p.try(req)
			if err == nil {
				p.acked = append(p.acked, bodies...)
				for range bodies {
					p.ackedBy = append(p.ackedBy, p.connAddr)
				}
				count.Add(int64(n))
				break
			}
			if time.Now().After(deadline) {
				p.givenUp = append(p.givenUp, bodies...)
				break
			}
			p.retries++
			// Back off while the server is down; the restart takes a
			// moment.
			time.Sleep(time.Duration(min(attempt+1, 20)) * 5 * time.Millisecond)
		}
	}
}

var rebuiltRe = regexp.MustCompile(`dedupe window rebuilt"? ids=[1-9]`)

// TestExactlyOnceKill9 kills the server with SIGKILL at random moments
// under publishers that retry with the same message id. After the
// restarts every acknowledged message is stored exactly once and every
// message given up on at most once: a request that was stored but whose
// reply was lost with the process is recognised by the window the
// restarted server rebuilt from its binlog. SMSS_E2E_DEDUPE_CYCLES runs
// more cycles (default 3).
func TestExactlyOnceKill9(t *testing.T) {
	cycles := 3
	if v := os.Getenv("SMSS_E2E_DEDUPE_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SMSS_E2E_DEDUPE_CYCLES=%q", v)
		}
		cycles = n
	}
	dir := t.TempDir()
	extra := "  flushLevel: 1\n  maxLogSize: 65536\n"
	if v := os.Getenv("SMSS_E2E_DEDUPE_WINDOW"); v != "" {
		// Only to show the test catches duplicates: 0 turns dedupe off.
		extra += "dedupe:\n  window: " + v + "\n"
	}
	kit.WriteConfig(t, dir, extra)
	topics := []string{"t0", "t1", "t2"}
	p := kit.Start(t, dir)
	c := kit.Dial(t, p.Addr)
	for _, name := range topics {
		if err := c.Create(name, 0); err != nil {
			t.Fatal(err)
		}
	}
	var addr atomic.Pointer[string]
	addr.Store(&p.Addr)
	var count atomic.Int64
	stop := make(chan struct{})
	const workers = 12
	pubs := make([]*retryPublisher, workers)
	var wg sync.WaitGroup
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for g := range pubs {
		pubs[g] = &retryPublisher{g: g, topic: topics[g%len(topics)], addr: &addr, budget: 30 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pubs[g].run(stop, rand.New(rand.NewPCG(seed, uint64(g))), &count)
		}()
	}
	rng := rand.New(rand.NewPCG(seed, 1000))
	rebuilt := 0
	for cycle := 0; cycle < cycles; cycle++ {
		target := count.Load() + int64(100+rng.IntN(1500))
		deadline := time.Now().Add(30 * time.Second)
		for count.Load() < target && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if count.Load() < target {
			t.Fatalf("cycle %d: only %d messages acknowledged\n%s", cycle, count.Load(), p.Out.String())
		}
		p.Kill()
		p = kit.Start(t, dir)
		addr.Store(&p.Addr)
		if rebuiltRe.MatchString(p.Out.String()) {
			rebuilt++
		}
	}
	// Let the publishers get through the last restart, then stop them.
	target := count.Load() + 200
	for deadline := time.Now().Add(30 * time.Second); count.Load() < target && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	p.Term()

	acked, givenUp, retries := map[string]bool{}, map[string]bool{}, 0
	for _, pb := range pubs {
		for _, b := range pb.acked {
			acked[b] = true
		}
		for _, b := range pb.givenUp {
			givenUp[b] = true
		}
		retries += pb.retries
	}
	s := kit.ReadStore(t, dir+"/data", topics)
	inBinlog := map[string]int{}
	for _, blk := range s.Binlog {
		if blk.Cmd != 1 {
			continue
		}
		recs := blk.Payload
		for len(recs) > 0 {
			rec, rest := protocol.NextRecord(recs)
			inBinlog[kit.BodyOf(t, rec)]++
			recs = rest
		}
	}
	inTopics := map[string]int{}
	for _, name := range topics {
		for _, blk := range s.Topics[name] {
			inTopics[kit.BodyOf(t, blk.Record)]++
		}
	}
	for body := range acked {
		if inBinlog[body] != 1 || inTopics[body] != 1 {
			t.Errorf("acknowledged message %s: %d times in the binlog, %d in its topic; want exactly once", body, inBinlog[body], inTopics[body])
		}
	}
	for body, n := range inBinlog {
		if n > 1 || inTopics[body] > 1 {
			t.Errorf("message %s stored more than once: %d times in the binlog, %d in its topic (acknowledged %v, given up %v)",
				body, n, inTopics[body], acked[body], givenUp[body])
		}
		if !acked[body] && !givenUp[body] {
			t.Errorf("message %s stored but never sent", body)
		}
	}
	t.Logf("%d cycles: %d messages acknowledged, %d given up, %d retries, %d restarts rebuilt a non-empty window",
		cycles, len(acked), len(givenUp), retries, rebuilt)
	if retries == 0 {
		t.Errorf("no publisher retried: the kills did not interrupt any request")
	}
}

// storedBodies counts each message body in a data directory's binlog pub
// blocks and topic files.
func storedBodies(t *testing.T, dataDir string, topics []string) (inBinlog, inTopics map[string]int) {
	t.Helper()
	s := kit.ReadStore(t, dataDir, topics)
	inBinlog, inTopics = map[string]int{}, map[string]int{}
	for _, blk := range s.Binlog {
		if blk.Cmd != 1 {
			continue
		}
		for recs := blk.Payload; len(recs) > 0; {
			var rec []byte
			rec, recs = protocol.NextRecord(recs)
			inBinlog[kit.BodyOf(t, rec)]++
		}
	}
	for _, name := range topics {
		for _, blk := range s.Topics[name] {
			inTopics[kit.BodyOf(t, blk.Record)]++
		}
	}
	return inBinlog, inTopics
}

// TestExactlyOnceFailover kills a master with SIGKILL under publishers
// that retry with the same message id, promotes its slave (restarted on
// its own data as a master) and points the publishers at it. Requests the
// old master stored and replicated but never answered are retried against
// the new master, which recognises them: nothing is stored twice, and
// everything the new master acknowledged is there exactly once. (Without
// syncSlaves, what the old master acknowledged but had not replicated is
// lost with it: counted, not an error.)
func TestExactlyOnceFailover(t *testing.T) {
	mdir, sdir := t.TempDir(), t.TempDir()
	mport := kit.FreePort(t)
	extra := ""
	if v := os.Getenv("SMSS_E2E_DEDUPE_WINDOW"); v != "" {
		extra = "dedupe:\n  window: " + v + "\n" // 0: show the test catches duplicates
	}
	kit.ReplConfig(t, mdir, mport, extra)
	kit.ReplConfig(t, sdir, 0, extra)
	m := kit.StartArgs(t, mdir)
	c := kit.Dial(t, m.Addr)
	topics := []string{"t0", "t1"}
	for _, name := range topics {
		if err := c.Create(name, 0); err != nil {
			t.Fatal(err)
		}
	}
	s := kit.StartReplSlave(t, sdir, mport, 0)

	var addr atomic.Pointer[string]
	addr.Store(&m.Addr)
	var count atomic.Int64
	stop := make(chan struct{})
	const workers = 8
	pubs := make([]*retryPublisher, workers)
	var wg sync.WaitGroup
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for g := range pubs {
		pubs[g] = &retryPublisher{g: g, topic: topics[g%len(topics)], addr: &addr, budget: 60 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pubs[g].run(stop, rand.New(rand.NewPCG(seed, uint64(g))), &count)
		}()
	}
	waitCount := func(n int64) {
		t.Helper()
		target := count.Load() + n
		for deadline := time.Now().Add(30 * time.Second); count.Load() < target; {
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d messages acknowledged", count.Load(), target)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitCount(int64(500 + rand.New(rand.NewPCG(seed, 99)).IntN(2000)))
	m.Kill()
	// The slave has what it received; promote it: restart it on its own
	// data as a master.
	s.Term()
	p := kit.StartArgs(t, sdir)
	if !rebuiltRe.MatchString(p.Out.String()) && os.Getenv("SMSS_E2E_DEDUPE_WINDOW") == "" {
		t.Fatalf("the promoted slave rebuilt no window:\n%s", kit.Tail(p.Out.String(), 4000))
	}
	addr.Store(&p.Addr)
	waitCount(300)
	close(stop)
	wg.Wait()
	p.Term()

	inBinlog, inTopics := storedBodies(t, filepath.Join(sdir, "data"), topics)
	lost, retries, acked := 0, 0, 0
	for _, pb := range pubs {
		retries += pb.retries
		for i, body := range pb.acked {
			acked++
			n := inBinlog[body]
			switch {
			case n > 1 || inTopics[body] > 1:
				t.Errorf("acknowledged message %s stored %d times (topic %d)", body, n, inTopics[body])
			case pb.ackedBy[i] == p.Addr && (n != 1 || inTopics[body] != 1):
				t.Errorf("message %s acknowledged by the new master: %d times in its binlog, %d in the topic", body, n, inTopics[body])
			case n == 0:
				lost++
			}
		}
	}
	for body, n := range inBinlog {
		if n > 1 || inTopics[body] != n {
			t.Errorf("message %s: %d times in the binlog, %d in its topic", body, n, inTopics[body])
		}
	}
	t.Logf("%d messages acknowledged (%d by the old master and not replicated before it died), %d retries", acked, lost, retries)
}
