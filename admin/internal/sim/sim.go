// Package sim feeds a metrics.Metrics and a metricstest.Fake with changing,
// plausible traffic, for the dashboard demo and the headless browser test.
package sim

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/metrics/metricstest"
	"github.com/smssmq/smss/protocol"
)

// Sim is a simulated server.
type Sim struct {
	Metrics *metrics.Metrics
	Source  *metricstest.Fake
	start   time.Time
	rng     *rand.Rand
	lastID  int64
	stats   map[string]metrics.TopicStats
	acked   map[string]int64
}

type topicLoad struct {
	name     string
	rate     float64 // messages per tick at peak
	size     int     // bytes per message
	subs     []string
	expireIn time.Duration
}

var loads = []topicLoad{
	{name: "orders", rate: 120, size: 420, subs: []string{"billing", "shipping"}},
	{name: "payments.settlement", rate: 45, size: 900, subs: []string{"ledger"}},
	{name: "audit-log", rate: 200, size: 180, subs: []string{"archiver"}},
	{name: "user-events", rate: 80, size: 300, subs: []string{"analytics", "search-indexer"}},
	{name: "tmp.session.7f3a", rate: 5, size: 120, expireIn: 40 * time.Minute},
	{name: "notifications", rate: 20, size: 250},
}

// New returns a simulated master (or slave) with some history.
func New(role string) *Sim {
	s := &Sim{
		Metrics: metrics.New(),
		start:   time.Now().Add(-3*time.Hour - 17*time.Minute),
		rng:     rand.New(rand.NewPCG(1, 2)),
		lastID:  1_250_000,
		stats:   map[string]metrics.TopicStats{},
		acked:   map[string]int64{},
	}
	now := time.Now()
	var topics []protocol.TopicInfo
	for i, l := range loads {
		t := protocol.TopicInfo{Name: l.name, CreateTime: now.Add(-time.Duration(48-i*7) * time.Hour).UnixMilli(), CreateEventID: int64(1000 * (i + 1))}
		if l.expireIn > 0 {
			t.ExpireAt = now.Add(l.expireIn).UnixMilli()
		}
		topics = append(topics, t)
		s.stats[l.name] = metrics.TopicStats{Bytes: int64(50_000 * l.rate * float64(l.size) / 10), Files: 1 + i%3,
			Messages: int64(50_000 * l.rate / 10), FirstEventID: int64(1000*(i+1) + 1), LastEventID: s.lastID - int64(i)}
	}
	topics = append(topics, protocol.TopicInfo{Name: "legacy.import", CreateTime: now.Add(-400 * time.Hour).UnixMilli(),
		State: protocol.TopicStateDeleted, StateChangeTime: now.Add(-2 * time.Minute).UnixMilli()})
	topics = append(topics, protocol.TopicInfo{Name: "tmp.job.991", CreateTime: now.Add(-time.Hour).UnixMilli(), ExpireAt: now.Add(-2 * time.Second).UnixMilli()})
	s.stats["tmp.job.991"] = metrics.TopicStats{Bytes: 8192, Files: 1, Messages: 31, FirstEventID: 1_100_000, LastEventID: 1_100_400}
	repl := metrics.ReplicationInfo{Role: role, LastEventID: s.lastID, Slaves: []metrics.SlaveInfo{}}
	if role == metrics.RoleSlave {
		repl.Master = &metrics.MasterLink{Addr: "10.0.0.5:12301", State: metrics.LinkStreaming, LagEvents: -1}
	}
	s.Source = metricstest.NewFake(metricstest.State{
		Topics: topics,
		Stats:  s.stats,
		Info: metrics.ServerInfo{Version: "0.9.0", Role: role, ListenAddr: "127.0.0.1:12301", DataDir: "data",
			StartTime: s.start.UnixMilli(), LastEventID: s.lastID, BinlogBytes: 3_400_000_000, BinlogFiles: 4,
			Config: map[string]any{"store.flushLevel": 1, "admin.token": "<redacted>"}},
		Replication: repl,
	})
	for range 60 {
		s.step(time.Second, false)
	}
	return s
}

// Run advances the simulation every tick until ctx ends.
func (s *Sim) Run(ctx context.Context, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.step(tick, true)
		}
	}
}

// step records one tick of traffic. With live false only the state moves
// (to give the sim a past without flooding the histograms).
func (s *Sim) step(tick time.Duration, live bool) {
	el := time.Since(s.start).Seconds()
	wave := 0.65 + 0.35*math.Sin(el/23) + 0.1*s.rng.Float64()
	frac := tick.Seconds()
	now := time.Now()
	var subs []metrics.SubscriberInfo
	for i, l := range loads {
		n := int(l.rate*wave*frac) + 1
		st := s.stats[l.name]
		st.Messages += int64(n)
		st.Bytes += int64(n * l.size)
		s.lastID += int64(n)
		st.LastEventID = s.lastID
		st.LastWriteTime = now.UnixMilli()
		s.stats[l.name] = st
		if live {
			s.Metrics.Published(l.name, n, n*l.size)
			for range max(1, n/10) {
				lat := time.Duration((0.3 + s.rng.ExpFloat64()*0.4) * float64(time.Millisecond))
				if s.rng.IntN(100) == 0 {
					lat *= 20
				}
				s.Metrics.ObserveRequest(protocol.CmdPub, lat, true)
			}
			s.Metrics.ObserveRequest(protocol.CmdTopicInfo, 80*time.Microsecond, true)
		}
		for j, who := range l.subs {
			key := l.name + "/" + who
			pos := s.acked[key]
			// Consumers keep up except one slow one that falls behind and
			// catches up in waves.
			behind := int64(0)
			if i == 0 && j == 1 {
				behind = int64(400 + 380*math.Sin(el/17))
			}
			if i == 2 {
				behind = int64(s.rng.IntN(40))
			}
			pos = st.LastEventID - behind
			s.acked[key] = pos
			if live {
				s.Metrics.Delivered(l.name, n, n*l.size)
			}
			subs = append(subs, metrics.SubscriberInfo{Topic: l.name, Who: who, RemoteAddr: "10.0.1." + itoa(20+i*3+j) + ":5" + itoa(1000+i*7+j),
				Since: s.start.Add(time.Duration(i) * time.Minute).UnixMilli(), Position: pos, Delivered: pos, Lag: behind})
		}
	}
	delays := metrics.NewDelayStats()
	for k := 1; k <= 40+int(10*math.Sin(el/30)); k++ {
		delays.Add(now.UnixMilli(), now.UnixMilli()+int64(k*k*k*97_000))
	}
	s.Source.Update(func(st *metricstest.State) {
		st.Stats = copyStats(s.stats)
		st.Subscribers = subs
		st.Delays = delays
		st.Info.LastEventID = s.lastID
		st.Replication.LastEventID = s.lastID
		if st.Replication.Role == metrics.RoleMaster {
			lag := int64(30 + 25*math.Sin(el/11))
			st.Replication.Slaves = []metrics.SlaveInfo{
				{RemoteAddr: "10.0.0.6:40112", Since: s.start.Add(5 * time.Minute).UnixMilli(), Position: s.lastID - lag, LagEvents: lag},
				{RemoteAddr: "10.0.0.7:40990", Since: now.Add(-20 * time.Minute).UnixMilli(), Position: s.lastID - 3, LagEvents: 3},
			}
		} else if st.Replication.Master != nil {
			st.Replication.Master.Position = s.lastID
			st.Replication.Master.LagSeconds = math.Max(0, 0.4*math.Sin(el/13))
			st.Replication.Master.LastContact = now.UnixMilli()
		}
	})
	if live {
		s.Metrics.ObserveGroup(8, 8*4096)
		s.Metrics.ObserveFsync(2 * time.Millisecond)
	}
}

func copyStats(m map[string]metrics.TopicStats) map[string]metrics.TopicStats {
	out := make(map[string]metrics.TopicStats, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}
