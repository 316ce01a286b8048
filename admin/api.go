package admin

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/smssmq/smss/admin/adminapi"
	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
)

// The JSON shapes live in adminapi so that the terminal client (adminclient)
// shares them without linking this server.
type (
	TopicView = adminapi.TopicView
	Info      = adminapi.Info
	errorBody = adminapi.ErrorBody
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Error: msg})
}

// source returns the Source or answers 503.
func (s *Server) source(w http.ResponseWriter) metrics.Source {
	if s.src == nil {
		writeError(w, http.StatusServiceUnavailable, "server state not available (no source attached)")
	}
	return s.src
}

func (s *Server) ready() (bool, string) {
	if s.opts.Ready == nil {
		return true, ""
	}
	return s.opts.Ready()
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if ok, why := s.ready(); !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		// Only the kind of state ("replication connecting"), never the
		// error text after it: this endpoint is public.
		kind, _, _ := strings.Cut(why, ": ")
		_, _ = w.Write([]byte("not ready: " + kind + "\n"))
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

func (s *Server) info() Info {
	now := time.Now()
	in := Info{Now: now.UnixMilli(), AuthRequired: s.opts.Token != ""}
	if s.src != nil {
		in.ServerInfo = s.src.ServerInfo()
	}
	start := s.started
	if in.StartTime > 0 {
		start = time.UnixMilli(in.StartTime)
	}
	in.UptimeSeconds = now.Sub(start).Seconds()
	in.Ready, in.ReadyReason = s.ready()
	return in
}

func (s *Server) apiInfo(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.info())
}

func (s *Server) apiTopics(w http.ResponseWriter, _ *http.Request) {
	src := s.source(w)
	if src == nil {
		return
	}
	topics, err := src.Topics()
	if err != nil {
		s.log.Warn("admin: list topics", "err", err)
		writeError(w, http.StatusInternalServerError, "list topics: "+err.Error())
		return
	}
	subs := map[string]int{}
	for _, sub := range src.Subscribers() {
		subs[sub.Topic]++
	}
	now := time.Now().UnixMilli()
	out := make([]TopicView, 0, len(topics))
	for i := range topics {
		v := TopicView{TopicInfo: topics[i], Status: metrics.TopicState(&topics[i], now), Subscribers: subs[topics[i].Name]}
		if v.Status != metrics.TopicStateDeleted {
			if st, ok := src.TopicStats(v.Name); ok {
				v.Stats = &st
			}
		}
		if c, ok := s.m.TopicCounters(v.Name); ok {
			v.Counters = &c
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) apiSubscribers(w http.ResponseWriter, _ *http.Request) {
	src := s.source(w)
	if src == nil {
		return
	}
	writeJSON(w, http.StatusOK, sortedSubscribers(src.Subscribers()))
}

// apiCursors lists the stored consumer positions (issue 22), largest lag
// first; ?topic= keeps one topic. A source without positions lists none.
func (s *Server) apiCursors(w http.ResponseWriter, r *http.Request) {
	src := s.source(w)
	if src == nil {
		return
	}
	out := []metrics.CursorInfo{}
	if cs, ok := src.(metrics.CursorSource); ok {
		topic := r.URL.Query().Get("topic")
		for _, c := range cs.Cursors() {
			if topic == "" || c.Topic == topic {
				out = append(out, c)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Lag != b.Lag {
			return a.Lag > b.Lag
		}
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Who < b.Who
	})
	writeJSON(w, http.StatusOK, out)
}

// apiQueues lists the work-queue groups (issue 33), most pending first;
// ?topic= keeps one topic. A source without groups lists none.
func (s *Server) apiQueues(w http.ResponseWriter, r *http.Request) {
	src := s.source(w)
	if src == nil {
		return
	}
	out := []protocol.QueueInfo{}
	if qs, ok := src.(metrics.QueueSource); ok {
		topic := r.URL.Query().Get("topic")
		for _, q := range qs.Queues() {
			if topic == "" || q.Topic == topic {
				out = append(out, q)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Pending != b.Pending {
			return a.Pending > b.Pending
		}
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Config.Group < b.Config.Group
	})
	writeJSON(w, http.StatusOK, out)
}

// sortedSubscribers orders by lag (largest first), then topic and who, so
// the consumers that need attention come first.
func sortedSubscribers(subs []metrics.SubscriberInfo) []metrics.SubscriberInfo {
	if subs == nil {
		subs = []metrics.SubscriberInfo{}
	}
	sort.SliceStable(subs, func(i, j int) bool {
		a, b := subs[i], subs[j]
		if a.Lag != b.Lag {
			return a.Lag > b.Lag
		}
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Who < b.Who
	})
	return subs
}

func (s *Server) apiReplication(w http.ResponseWriter, _ *http.Request) {
	src := s.source(w)
	if src == nil {
		return
	}
	writeJSON(w, http.StatusOK, normReplication(src.Replication()))
}

// apiCluster answers /api/cluster on a cluster node (smss -role auto): the
// report of every node (metrics.ClusterReportInfo); 404 elsewhere.
func (s *Server) apiCluster(w http.ResponseWriter, r *http.Request) {
	src := s.source(w)
	if src == nil {
		return
	}
	cs, ok := src.(metrics.ClusterSource)
	if ok {
		var rep metrics.ClusterReportInfo
		if rep, ok = cs.ClusterReport(r.Context()); ok {
			if rep.Nodes == nil {
				rep.Nodes = []protocol.ClusterNode{}
			}
			writeJSON(w, http.StatusOK, rep)
			return
		}
	}
	writeError(w, http.StatusNotFound, "this node is not one of a cluster (smss -role auto)")
}

func normReplication(r metrics.ReplicationInfo) metrics.ReplicationInfo {
	if r.Slaves == nil {
		r.Slaves = []metrics.SlaveInfo{}
	}
	return r
}

func (s *Server) apiDelays(w http.ResponseWriter, _ *http.Request) {
	src := s.source(w)
	if src == nil {
		return
	}
	d := src.Delays()
	if d.Buckets == nil {
		d.Buckets = metrics.NewDelayStats().Buckets
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) apiSnapshot(w http.ResponseWriter, _ *http.Request) {
	b := s.sampler.latest()
	if b == nil {
		writeError(w, http.StatusServiceUnavailable, "no snapshot yet")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}
