package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smssmq/smss/protocol"
)

// Topic states as exported in smss_topics{state}.
const (
	TopicStateNormal  = "normal"
	TopicStateExpired = "expired" // past expireAt, not reaped yet
	TopicStateDeleted = "deleted"
)

// TopicState names t's state at nowMs.
func TopicState(t *protocol.TopicInfo, nowMs int64) string {
	switch {
	case t.State == protocol.TopicStateDeleted:
		return TopicStateDeleted
	case t.Expired(nowMs):
		return TopicStateExpired
	}
	return TopicStateNormal
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
}

var (
	descInfo        = desc("info", "Always 1; labels describe the server.", "version", "role")
	descStart       = desc("start_time_seconds", "Process start, Unix seconds.")
	descLastID      = desc("last_event_id", "Last eventId assigned (master) or applied (slave).")
	descBinlogBytes = desc("binlog_disk_bytes", "Size of all binlog files.")
	descEpoch       = desc("promotion_epoch", "Promotion epoch: grows with every promotion (on a slave: the highest of a master it followed).")
	descIsMaster    = desc("is_master", "1 on a master, 0 on a slave; changes when a slave is promoted.")
	descBinlogFiles = desc("binlog_files", "Number of binlog files.")
	descDedupeIDs   = desc("dedupe_ids", "Message ids held in the dedupe window, over all topics.")

	descTopics       = desc("topics", "Topics by state.", "state")
	descTopicBytes   = desc("topic_disk_bytes", "Size of a topic's log files.", "topic")
	descTopicMsgs    = desc("topic_messages", "Messages a topic holds on disk.", "topic")
	descTopicLast    = desc("topic_last_event_id", "EventId of a topic's newest message.", "topic")
	descSubscribers  = desc("subscribers", "Live subscriptions.")
	descSubLag       = desc("subscriber_lag_events", "Topic's last eventId minus the subscriber's last acknowledged eventId.", "topic", "who")
	descSubPos       = desc("subscriber_position", "Last eventId the subscriber acknowledged.", "topic", "who")
	descSlaves       = desc("replication_slaves", "Slaves streaming from this master.")
	descSlaveLag     = desc("replication_slave_lag_events", "Master's last eventId minus the last eventId sent to the slave.", "slave")
	descSlaveConf    = desc("replication_slave_confirmed_event_id", "Last eventId a confirming slave confirmed it has in its binlog (smss slaves only).", "slave")
	descSlaveConfLat = desc("replication_slave_confirm_latency_seconds", "Time from the master's commit of a block to the slave's confirmation, for its latest confirmation.", "slave")
	descSyncSlaves   = desc("replication_sync_slaves", "replication.syncSlaves: confirmations a write waits for (0: asynchronous).")
	descSyncConfirm  = desc("replication_sync_confirming_slaves", "Connected slaves that confirm what they apply.")
	descSyncWaiting  = desc("replication_sync_waiting_writes", "Writes whose reply waits for slave confirmations.")
	descSyncDegraded = desc("replication_sync_degraded", "1 while writes are answered asynchronously after a confirmation timeout (onSyncTimeout: degrade).")
	descSyncBefore   = desc("replication_sync_before_fsync", "1 when slaves get each write before the master's own fsync (store.flushLevel 2 with syncSlaves): the two sync side by side.")
	descSyncTimeouts = desc("replication_sync_timeouts_total", "Writes not confirmed by the slaves within replication.syncTimeoutMs, by the mode that answered them (fail: 400, degrade: 200).", "mode")
	descCommitPoint  = desc("replication_commit_point", "The highest eventId subscribers are served up to (read-committed delivery): what enough slaves confirmed; on a slave, what its master last sent.")
	descHeldByCommit = desc("replication_commit_held_subscribers", "Subscribers that read everything up to the commit point and wait for it to move.")
	descSyncUnconf   = desc("replication_sync_unconfirmed_writes_total", "Writes answered 200 without the slaves' confirmations (degrade mode).")
	descReplConn     = desc("replication_connected", "1 when this slave's replica stream is open.")
	descReplLag      = desc("replication_lag_events", "Master's last eventId minus this slave's (when known).")
	descReplLagSec   = desc("replication_lag_seconds", "Age of the last applied block while catching up; 0 when caught up.")
	descReplQuiet    = desc("replication_caught_up", "1 when the slave's stream brought no block for replication.promoteQuietMs (its master takes no writes), else 0.")
	descDelayed      = desc("delayed_pending", "Delayed messages not yet applied.")
	descDelayedDue   = desc("delayed_pending_due", "Pending delayed messages by due time (within the label's span after the previous bucket).", "within")
	descSourceErrs   = desc("source_errors_total", "Scrapes during which reading server state failed.")
	descCertExpiry   = desc("tls_certificate_expiry_timestamp_seconds", "NotAfter of a TLS certificate in force, Unix seconds; key is its configuration key.", "key")
	allSourceMetrics = []*prometheus.Desc{descInfo, descStart, descLastID, descBinlogBytes, descBinlogFiles, descEpoch, descIsMaster, descDedupeIDs,
		descTopics, descTopicBytes, descTopicMsgs, descTopicLast, descSubscribers, descSubLag, descSubPos,
		descSlaves, descSlaveLag, descSlaveConf, descSlaveConfLat, descSyncSlaves, descSyncConfirm, descSyncWaiting,
		descSyncDegraded, descSyncBefore, descSyncTimeouts, descSyncUnconf, descCommitPoint, descHeldByCommit, descReplConn, descReplLag, descReplLagSec, descDelayed, descDelayedDue, descSourceErrs,
		descCertExpiry}
)

// sourceCollector turns the Source into gauges at scrape time.
type sourceCollector struct{ m *Metrics }

func (c *sourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allSourceMetrics {
		ch <- d
	}
	for _, d := range queueDescs {
		ch <- d
	}
	for _, d := range cursorDescs {
		ch <- d
	}
	for _, d := range clusterDescs {
		ch <- d
	}
}

func (c *sourceCollector) Collect(ch chan<- prometheus.Metric) {
	// Emitted last, after this scrape's own failures were counted: a
	// CounterFunc would race with this collector within one Gather.
	defer func() {
		ch <- prometheus.MustNewConstMetric(descSourceErrs, prometheus.CounterValue, float64(c.m.sourceErr.Load()))
	}()
	src := c.m.Source()
	if src == nil {
		return
	}
	e := emitter{ch: ch}
	info := src.ServerInfo()
	e.gauge(descInfo, 1, labelValue(info.Version), labelValue(info.Role))
	e.gauge(descStart, float64(info.StartTime)/1000)
	e.gauge(descLastID, float64(info.LastEventID))
	e.gauge(descBinlogBytes, float64(info.BinlogBytes))
	e.gauge(descBinlogFiles, float64(info.BinlogFiles))
	e.gauge(descEpoch, float64(info.Epoch))
	isMaster := 0.0
	if info.Role == RoleMaster {
		isMaster = 1
	}
	e.gauge(descIsMaster, isMaster)
	e.gauge(descDedupeIDs, float64(info.DedupeIDs))
	seenCert := map[string]bool{}
	for _, c := range info.Certificates {
		if k := labelValue(c.Key); !seenCert[k] {
			seenCert[k] = true
			e.gauge(descCertExpiry, float64(c.NotAfter)/1000, k)
		}
	}

	if topics, err := src.Topics(); err != nil {
		c.m.sourceErr.Add(1)
	} else {
		c.collectTopics(&e, src, topics)
	}

	subs := src.Subscribers()
	e.gauge(descSubscribers, float64(len(subs)))
	seen := map[[2]string]bool{}
	for _, s := range subs {
		k := [2]string{labelValue(s.Topic), labelValue(s.Who)}
		if seen[k] {
			continue
		}
		seen[k] = true
		e.gauge(descSubLag, float64(s.Lag), k[0], k[1])
		e.gauge(descSubPos, float64(s.Position), k[0], k[1])
	}

	if cs, ok := src.(CursorSource); ok {
		collectCursors(&e, cs.Cursors())
	}
	if qs, ok := src.(QueueSource); ok {
		collectQueues(&e, qs.Queues())
	}

	c.collectReplication(&e, src.Replication())

	if cs, ok := src.(ClusterSource); ok {
		if ci, ok := cs.Cluster(); ok {
			collectCluster(&e, ci)
		}
	}

	d := src.Delays()
	e.gauge(descDelayed, float64(d.Pending))
	for _, b := range d.Buckets {
		e.gauge(descDelayedDue, float64(b.Count), labelValue(b.Label))
	}
}

func (c *sourceCollector) collectTopics(e *emitter, src Source, topics []protocol.TopicInfo) {
	now := time.Now().UnixMilli()
	byState := map[string]int{TopicStateNormal: 0, TopicStateExpired: 0, TopicStateDeleted: 0}
	seen := make(map[string]bool, len(topics))
	for i := range topics {
		t := &topics[i]
		st := TopicState(t, now)
		byState[st]++
		if st == TopicStateDeleted {
			continue
		}
		label := labelValue(t.Name)
		if seen[label] {
			continue
		}
		stats, ok := src.TopicStats(t.Name)
		if !ok {
			continue
		}
		seen[label] = true
		e.gauge(descTopicBytes, float64(stats.Bytes), label)
		if stats.Messages >= 0 {
			e.gauge(descTopicMsgs, float64(stats.Messages), label)
		}
		e.gauge(descTopicLast, float64(stats.LastEventID), label)
	}
	for st, n := range byState {
		e.gauge(descTopics, float64(n), st)
	}
}

func (c *sourceCollector) collectReplication(e *emitter, r ReplicationInfo) {
	if r.ReadCommitted {
		e.gauge(descCommitPoint, float64(r.CommitPoint))
		e.gauge(descHeldByCommit, float64(r.HeldByCommit))
	}
	if r.Role == RoleSlave {
		connected, lagEvents, lagSec, caughtUp := 0.0, -1.0, 0.0, 0.0
		if l := r.Master; l != nil {
			if l.State == LinkStreaming {
				connected = 1
			}
			lagEvents, lagSec = float64(l.LagEvents), l.LagSeconds
			if l.CaughtUp {
				caughtUp = 1
			}
		}
		e.gauge(descReplConn, connected)
		e.gauge(descReplQuiet, caughtUp)
		if lagEvents >= 0 {
			e.gauge(descReplLag, lagEvents)
		}
		e.gauge(descReplLagSec, lagSec)
		return
	}
	e.gauge(descSlaves, float64(len(r.Slaves)))
	seen := map[string]bool{}
	for _, s := range r.Slaves {
		label := labelValue(s.RemoteAddr)
		if seen[label] {
			continue
		}
		seen[label] = true
		e.gauge(descSlaveLag, float64(s.LagEvents), label)
		if s.Confirming {
			e.gauge(descSlaveConf, float64(s.Confirmed), label)
			e.gauge(descSlaveConfLat, s.ConfirmLatencySeconds, label)
		}
	}
	if y := r.Sync; y != nil {
		e.gauge(descSyncSlaves, float64(y.SyncSlaves))
		e.gauge(descSyncConfirm, float64(y.Confirming))
		e.gauge(descSyncWaiting, float64(y.Waiting))
		degraded := 0.0
		if y.Degraded {
			degraded = 1
		}
		e.gauge(descSyncDegraded, degraded)
		before := 0.0
		if y.BeforeSync {
			before = 1
		}
		e.gauge(descSyncBefore, before)
		e.counter(descSyncTimeouts, float64(y.TimeoutsFail), "fail")
		e.counter(descSyncTimeouts, float64(y.TimeoutsDegrade), "degrade")
		e.counter(descSyncUnconf, float64(y.Unconfirmed))
	}
}

var (
	descClusterEpoch   = desc("cluster_epoch", "The cluster state's epoch this node applied (-role auto).")
	descClusterVersion = desc("cluster_state_version", "Version of the cluster state this node applied: the consensus log index of its last change (elections, in-sync set changes).")
	descClusterMaster  = desc("cluster_is_master", "1 when the cluster names this node master.")
	descClusterLeader  = desc("cluster_is_raft_leader", "1 on the consensus (raft) leader, whose controller elects and keeps the in-sync set.")
	descClusterLease   = desc("cluster_lease_valid", "1 while this node heard from a consensus majority within cluster.leaseMs; a master answers writes only then.")
	descClusterFenced  = desc("cluster_fenced", "1 while this node is a master that refuses writes (lost lease, an epoch not taken yet, no longer the cluster's master).")
	descClusterInSync  = desc("cluster_in_sync_members", "Members of the cluster's in-sync set (every write waits for each).")
	descClusterBlocked = desc("cluster_blocked", "1 on the consensus leader while its controller holds an action back (no eligible member reachable, bootstrap waiting, a shrink held by minISR); status says why.")

	clusterDescs = []*prometheus.Desc{descClusterEpoch, descClusterVersion, descClusterMaster, descClusterLeader,
		descClusterLease, descClusterFenced, descClusterInSync, descClusterBlocked}
)

func b01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func collectCluster(e *emitter, c ClusterInfo) {
	e.gauge(descClusterEpoch, float64(c.Epoch))
	e.gauge(descClusterVersion, float64(c.Version))
	e.gauge(descClusterMaster, b01(c.IsMaster))
	e.gauge(descClusterLeader, b01(c.IsLeader))
	e.gauge(descClusterLease, b01(c.LeaseValid))
	e.gauge(descClusterFenced, b01(c.Fenced))
	e.gauge(descClusterInSync, float64(c.InSync))
	e.gauge(descClusterBlocked, b01(c.Blocked))
}

type emitter struct{ ch chan<- prometheus.Metric }

func (e *emitter) counter(d *prometheus.Desc, v float64, labels ...string) {
	e.ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func (e *emitter) gauge(d *prometheus.Desc, v float64, labels ...string) {
	e.ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}
