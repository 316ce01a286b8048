package main

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/smssmq/smss/protocol"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/smssmq/smss/meta"
	"github.com/smssmq/smss/topicblock"
)

// permanent reports whether the workload never deletes the topic.
func permanent(name string) bool {
	// The server creates the stored positions' topic itself.
	return name == delayTopic || slices.Contains(pubTopics, name) || name == protocol.CursorTopic
}

// checkLedger compares what the workload was told with what the master's
// binlog holds. Topics with a lifetime that ended before reapBy must have
// been reaped; final additionally requires every delay to have fired.
func checkLedger(led *ledger, st *binState, final bool, reapBy int64) error {
	led.mu.Lock()
	defer led.mu.Unlock()
	for body, p := range led.pubs {
		loc := st.pubs[body]
		n := 0
		if loc != nil {
			n = loc.count
			if loc.topic != p.topic {
				return fmt.Errorf("message %q published to %s is in the binlog under %s", body, p.topic, loc.topic)
			}
		}
		if err := wantCount("message", body, p.state, n); err != nil {
			return err
		}
	}
	for body, loc := range st.pubs {
		if led.pubs[body] == nil {
			return fmt.Errorf("the binlog holds message %q, which nobody published", body)
		}
		if loc.count > 1 {
			return fmt.Errorf("the binlog holds message %q %d times", body, loc.count)
		}
	}
	// Each publisher waits for a reply before its next request, so what it
	// got stored must carry increasing eventIds in sending order.
	for w, bodies := range led.order {
		prev, prevBody := int64(0), ""
		for _, b := range bodies {
			loc := st.pubs[b]
			if loc == nil {
				continue
			}
			if loc.id <= prev {
				return fmt.Errorf("publisher %d: %q got eventId %d, after %q got %d", w, b, loc.id, prevBody, prev)
			}
			prev, prevBody = loc.id, b
		}
	}
	for body, d := range led.delays {
		loc := st.delays[body]
		if loc == nil {
			loc = &delayLoc{}
		}
		if err := wantCount("delayed message", body, d.state, loc.blocks); err != nil {
			return err
		}
	}
	for body, loc := range st.delays {
		switch {
		case led.delays[body] == nil:
			return fmt.Errorf("the binlog holds delayed message %q, which nobody sent", body)
		case loc.blocks > 1:
			return fmt.Errorf("delayed message %q stored %d times", body, loc.blocks)
		case loc.applies > 1:
			return fmt.Errorf("delayed message %q applied %d times", body, loc.applies)
		case loc.applies == 1 && loc.applyID <= loc.delayID:
			return fmt.Errorf("delayed message %q applied (eventId %d) before it was stored (%d)", body, loc.applyID, loc.delayID)
		case final && loc.blocks == 1 && loc.applies == 0:
			return fmt.Errorf("delayed message %q (delay eventId %d, due %d) was never applied", body, loc.delayID, loc.trigger)
		}
	}
	for name, tr := range led.topics {
		created := len(st.creates[name])
		if err := wantCount("create of topic", name, tr.create, created); err != nil {
			return err
		}
		deleted := st.deletes[name]
		switch {
		case tr.delSent && created == 1:
			if err := wantCount("delete of topic", name, tr.del, deleted); err != nil {
				return err
			}
		case deleted > created:
			return fmt.Errorf("topic %s deleted %d times, created %d", name, deleted, created)
		case tr.life && created == 1 && deleted == 0 && tr.expires < reapBy:
			return fmt.Errorf("topic %s expired at %d and was not reaped", name, tr.expires)
		}
	}
	for name := range st.creates {
		if led.topics[name] == nil && !permanent(name) {
			return fmt.Errorf("the binlog creates topic %s, which nobody created", name)
		}
	}
	return nil
}

func wantCount(what, key string, o outcome, n int) error {
	switch {
	case o == acked && n != 1:
		return fmt.Errorf("acknowledged %s %q is in the binlog %d times, want exactly once", what, key, n)
	case o == refused && n != 0:
		return fmt.Errorf("refused %s %q is in the binlog %d times, want none", what, key, n)
	case n > 1:
		return fmt.Errorf("%s %q (%s) is in the binlog %d times", what, key, o, n)
	}
	return nil
}

// checkFiles compares a server's topic files and topic list with the
// binlog state: exact for a master; a slave may lack the tail of a topic
// with a lifetime (it skips writes it applies after the expiry).
func checkFiles(addr, dataDir string, st *binState, slave bool) error {
	list, err := listTopics(addr)
	if err != nil {
		return err
	}
	for name, lt := range st.live {
		got, ok := list[name]
		if !ok {
			if slave && !permanent(name) {
				continue
			}
			return fmt.Errorf("topic %s (created at eventId %d) is alive in the binlog but not in the topic list", name, lt.createID)
		}
		if got.CreateEventID != lt.createID || got.ExpireAt != lt.expireAt {
			return fmt.Errorf("topic %s: list says createEventId %d expireAt %d, the binlog %d and %d",
				name, got.CreateEventID, got.ExpireAt, lt.createID, lt.expireAt)
		}
	}
	for name := range list {
		if st.live[name] == nil {
			return fmt.Errorf("topic %s is in the topic list but not alive in the binlog", name)
		}
	}
	for name, lt := range st.live {
		msgs, exists, err := readTopic(dataDir, name)
		if err != nil {
			return fmt.Errorf("topic %s: %w", name, err)
		}
		if !exists && (!slave || permanent(name)) {
			return fmt.Errorf("topic %s has no directory", name)
		}
		want := lt.msgs
		if name == protocol.CursorTopic && len(msgs) < len(want) {
			// Compaction removes the files before a snapshot: what is
			// left must be the binlog's last messages.
			want = want[len(want)-len(msgs):]
		}
		if err := sameMsgs(msgs, want, slave && !permanent(name)); err != nil {
			return fmt.Errorf("topic %s files vs binlog: %w", name, err)
		}
	}
	for name := range st.creates {
		if st.live[name] != nil {
			continue
		}
		dir := topicblock.Dir(filepath.Join(dataDir, "topic"), []byte(name), 10)
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("deleted topic %s still has its directory %s (%v)", name, dir, err)
		}
	}
	return nil
}

// checkSubscriber compares what a subscriber received with its topic; all
// requires it to have received everything.
func checkSubscriber(s *subscriber, st *binState, all bool) error {
	got, err := s.snapshot()
	if err != nil {
		return err
	}
	lt := st.live[s.topic]
	if lt == nil {
		return fmt.Errorf("subscriber %s: topic %s is not alive", s.name, s.topic)
	}
	want := lt.msgs
	n := min(len(got), len(want))
	if err := sameMsgs(asTopicMsgs(got[:n]), want[:n], false); err != nil {
		return fmt.Errorf("subscriber %s received: %w", s.name, err)
	}
	if all && len(got) != len(want) {
		return fmt.Errorf("subscriber %s received %d of %d messages", s.name, len(got), len(want))
	}
	return nil
}

func asTopicMsgs(in []subMsg) []topicMsg {
	out := make([]topicMsg, len(in))
	for i, m := range in {
		out[i] = topicMsg{id: m.id, rec: m.rec}
	}
	return out
}

// checkStoppedMeta opens the meta store of a server that is not running.
// After a crash meta may lag the binlog (recovery rolls it forward), but it
// can never be ahead: every topic and delay it holds must come from a block
// the binlog holds. exact (after a clean stop) requires the topics to be
// exactly those alive in the binlog and the delay queue to be exactly the
// delays not yet applied.
func checkStoppedMeta(dataDir string, exact, slave bool) error {
	bin, err := readBinlog(dataDir)
	if err != nil {
		return err
	}
	st, err := parseBinlog(bin, !exact)
	if err != nil {
		return err
	}
	ms, err := meta.Open(meta.Options{Dir: filepath.Join(dataDir, "meta"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer ms.Close()
	topics, err := ms.Topics()
	if err != nil {
		return err
	}
	inMeta := map[string]bool{}
	for _, t := range topics {
		inMeta[t.Name] = true
		if !slices.Contains(st.creates[t.Name], createRec{id: t.CreateEventID, expireAt: t.ExpireAt}) {
			return fmt.Errorf("meta holds topic %s (createEventId %d, expireAt %d) that no binlog create made", t.Name, t.CreateEventID, t.ExpireAt)
		}
		if exact && st.live[t.Name] == nil {
			return fmt.Errorf("meta holds topic %s, which the binlog deleted", t.Name)
		}
	}
	if exact {
		for name := range st.live {
			if !inMeta[name] && (!slave || permanent(name)) {
				return fmt.Errorf("topic %s is alive in the binlog but not in meta", name)
			}
		}
	}
	delays, err := ms.DueDelays(math.MaxInt64, math.MaxInt32)
	if err != nil {
		return err
	}
	queued := map[int64]bool{}
	for _, d := range delays {
		loc := st.delayIDs[d.DelayEventID]
		if loc == nil || loc.topic != d.Topic || loc.trigger != d.TriggerTime {
			return fmt.Errorf("meta holds delay %d on %s (trigger %d) that no binlog delay made", d.DelayEventID, d.Topic, d.TriggerTime)
		}
		if exact && loc.applies > 0 {
			return fmt.Errorf("meta still queues delay %d, applied at eventId %d", d.DelayEventID, loc.applyID)
		}
		queued[d.DelayEventID] = true
	}
	if exact {
		for id, loc := range st.delayIDs {
			if loc.applies == 0 && st.live[loc.topic] != nil && !queued[id] {
				return fmt.Errorf("delay %d on %s is neither applied nor queued in meta", id, loc.topic)
			}
		}
		ck, ok, err := ms.Checkpoint()
		if err != nil {
			return err
		}
		if !ok || ck.NextEventID <= st.lastID {
			return fmt.Errorf("checkpoint %+v (present %v) after a clean stop does not cover the last eventId %d", ck, ok, st.lastID)
		}
	}
	return nil
}

// retry runs check until it passes or timeout passes, and returns its last
// error. Servers keep writing on their own (delays fire, topics expire)
// while the workload is paused, so a check may see a group half-written
// or files that changed between two reads; a real violation persists.
func retry(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stableBinlog reads a binlog twice and fails (for a retry) unless both
// reads agree and end at a block boundary.
func stableBinlog(dataDir string) ([]byte, *binState, error) {
	bin, err := readBinlog(dataDir)
	if err != nil {
		return nil, nil, err
	}
	st, err := parseBinlog(bin, false)
	if err != nil {
		return nil, nil, err
	}
	again, err := readBinlog(dataDir)
	if err != nil {
		return nil, nil, err
	}
	if !bytes.Equal(bin, again) {
		return nil, nil, errors.New("binlog changed while being read")
	}
	return bin, st, nil
}
