package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/admin/adminapi"
	"github.com/smssmq/smss/metrics"
)

// Bounds on what one snapshot carries, so a server with thousands of
// subscribers or topics still pushes small events.
const (
	maxSnapshotSubscribers = 100
	maxSnapshotTopics      = 50
	streamWriteTimeout     = 10 * time.Second
)

type (
	Snapshot  = adminapi.Snapshot
	TopicRate = adminapi.TopicRate
	Point     = adminapi.Point
)

// sampler takes a snapshot every interval, encodes it once and wakes every
// stream.
type sampler struct {
	s *Server

	// Only the run goroutine touches these.
	prev       metrics.Reading
	prevTopics map[string]metrics.TopicCounters

	mu      sync.Mutex
	seq     uint64
	last    []byte
	history []Point // ring in time order, at most Options.History
	next    chan struct{}

	streams atomic.Int32
}

func newSampler(s *Server) *sampler {
	return &sampler{s: s, next: make(chan struct{}), prevTopics: map[string]metrics.TopicCounters{}}
}

func (sp *sampler) run(stop <-chan struct{}) {
	sp.prev = sp.s.m.Read()
	sp.s.m.EachTopic(func(name string, c metrics.TopicCounters) { sp.prevTopics[name] = c })
	sp.publish(sp.prev, map[string]metrics.TopicCounters{}, false)
	t := time.NewTicker(sp.s.opts.SampleInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			cur := sp.s.m.Read()
			topics := map[string]metrics.TopicCounters{}
			sp.s.m.EachTopic(func(name string, c metrics.TopicCounters) { topics[name] = c })
			sp.publish(cur, topics, true)
			sp.prev, sp.prevTopics = cur, topics
		}
	}
}

// publish builds, encodes and broadcasts the snapshot for the interval
// ending at cur. A panicking Source must not take the process down.
func (sp *sampler) publish(cur metrics.Reading, topics map[string]metrics.TopicCounters, withRates bool) {
	defer func() {
		if p := recover(); p != nil {
			sp.s.log.Error("admin: snapshot failed", "panic", fmt.Sprint(p))
			sp.s.m.Error(metrics.KindPanic)
		}
	}()
	snap := Snapshot{Time: cur.At.UnixMilli(), Subscribers: []metrics.SubscriberInfo{}, Topics: []TopicRate{}}
	snap.Rates = metrics.Between(cur, cur) // empty interval: no rates yet
	if withRates {
		snap.Rates = metrics.Between(sp.prev, cur)
		snap.Topics = topicRates(sp.prevTopics, topics, snap.Rates.Seconds)
	}
	snap.Ready, snap.ReadyReason = sp.s.ready()
	if src := sp.s.src; src != nil {
		subs := sortedSubscribers(src.Subscribers())
		snap.SubscriberCount = len(subs)
		if len(subs) > 0 {
			snap.MaxLag = subs[0].Lag
		}
		if len(subs) > maxSnapshotSubscribers {
			subs = subs[:maxSnapshotSubscribers]
		}
		snap.Subscribers = subs
		snap.Replication = normReplication(src.Replication())
		snap.LastEventID = snap.Replication.LastEventID
	} else {
		snap.Replication.Slaves = []metrics.SlaveInfo{}
	}
	b, err := json.Marshal(snap)
	if err != nil {
		sp.s.log.Error("admin: encode snapshot", "err", err)
		return
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.seq++
	sp.last = b
	if withRates {
		if len(sp.history) >= sp.s.opts.History {
			copy(sp.history, sp.history[1:])
			sp.history = sp.history[:len(sp.history)-1]
		}
		sp.history = append(sp.history, Point{Time: snap.Time, Rates: snap.Rates})
	}
	close(sp.next)
	sp.next = make(chan struct{})
}

func topicRates(prev, cur map[string]metrics.TopicCounters, secs float64) []TopicRate {
	out := []TopicRate{}
	if secs <= 0 {
		return out
	}
	for name, c := range cur {
		p := prev[name] // a new topic starts from zero
		if c.Messages < p.Messages || c.DelivMsgs < p.DelivMsgs {
			p = metrics.TopicCounters{} // deleted and recreated in between
		}
		r := TopicRate{
			Name:                name,
			MsgsPerSec:          float64(c.Messages-p.Messages) / secs,
			BytesPerSec:         float64(c.Bytes-p.Bytes) / secs,
			DeliveredMsgsPerSec: float64(c.DelivMsgs-p.DelivMsgs) / secs,
		}
		if r.MsgsPerSec > 0 || r.DeliveredMsgsPerSec > 0 {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].MsgsPerSec+out[i].DeliveredMsgsPerSec, out[j].MsgsPerSec+out[j].DeliveredMsgsPerSec
		if a != b {
			return a > b
		}
		return out[i].Name < out[j].Name
	})
	if len(out) > maxSnapshotTopics {
		out = out[:maxSnapshotTopics]
	}
	return out
}

// latest is the encoded last snapshot, nil before the first.
func (sp *sampler) latest() []byte {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.last
}

// current returns the last snapshot with its sequence number and a channel
// closed when the next one is ready.
func (sp *sampler) current() (uint64, []byte, <-chan struct{}) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.seq, sp.last, sp.next
}

func (sp *sampler) historyJSON() ([]byte, error) {
	sp.mu.Lock()
	h := append([]Point{}, sp.history...)
	sp.mu.Unlock()
	return json.Marshal(h)
}

// apiEvents streams server-sent events: "history" (the last Options.History
// points) once, then "snapshot" whenever the sampler takes one.
func (s *Server) apiEvents(w http.ResponseWriter, r *http.Request) {
	sp := s.sampler
	if n := sp.streams.Add(1); int(n) > s.opts.MaxStreams {
		sp.streams.Add(-1)
		writeError(w, http.StatusServiceUnavailable, "too many event streams")
		return
	}
	defer sp.streams.Add(-1)

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // keep reverse proxies from buffering the stream
	w.WriteHeader(http.StatusOK)

	hist, err := sp.historyJSON()
	if err != nil {
		return
	}
	send := func(event string, data []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil || !send("history", hist) {
		return
	}
	var sent uint64
	for {
		seq, b, next := sp.current()
		if b != nil && seq != sent {
			if !send("snapshot", b) {
				return
			}
			sent = seq
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.stopped:
			return
		case <-next:
		}
	}
}
