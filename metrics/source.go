package metrics

import (
	"context"
	"time"

	"github.com/smssmq/smss/protocol"
)

// Source is the server-side state that is read when someone asks for it
// (a scrape, an admin API call, the dashboard's once-a-second snapshot)
// rather than counted on the hot path. The broker/server implements it.
// Every method must be safe for concurrent use and cheap enough to run once
// a second; none may block on the writer.
type Source interface {
	// Topics returns every topic meta entry, deleted-but-not-reaped and
	// expired ones included (*broker.Broker already has it).
	Topics() ([]protocol.TopicInfo, error)
	// TopicStats returns the on-disk figures of one topic; false when the
	// topic is unknown.
	TopicStats(name string) (TopicStats, bool)
	// Subscribers lists the live subscriptions of this instance.
	Subscribers() []SubscriberInfo
	// Replication describes the replication link(s) of this instance.
	Replication() ReplicationInfo
	// Delays summarises the delayed messages not yet applied.
	Delays() DelayStats
	// ServerInfo describes the process.
	ServerInfo() ServerInfo
}

// TopicStats are the on-disk figures of one topic. Fields that are unknown
// are -1.
type TopicStats struct {
	// Bytes is the size of all of the topic's log files (index files
	// excluded).
	Bytes int64 `json:"bytes"`
	// Files is the number of log files.
	Files int `json:"files"`
	// Messages is the number of messages still on disk.
	Messages int64 `json:"messages"`
	// FirstEventID and LastEventID are the oldest retained and the newest
	// message's eventIds; 0 when the topic holds no message.
	FirstEventID int64 `json:"firstEventId"`
	LastEventID  int64 `json:"lastEventId"`
	// LastWriteTime is the ms timestamp of the newest message; 0 if none.
	LastWriteTime int64 `json:"lastWriteTime"`
}

// SubscriberInfo is one live subscription.
type SubscriberInfo struct {
	Topic      string `json:"topic"`
	Who        string `json:"who"`
	RemoteAddr string `json:"remoteAddr"`
	// Since is when the subscription started (ms).
	Since int64 `json:"since"`
	// StartEventID is the eventId the subscriber asked to start after.
	StartEventID int64 `json:"startEventId"`
	// Delivered is the eventId of the last message sent to it, Position the
	// last one it acknowledged (smss keeps no offsets: both are of this
	// session, starting at StartEventID).
	Delivered int64 `json:"delivered"`
	Position  int64 `json:"position"`
	// Lag is the topic's last message eventId minus Position, 0 when caught
	// up. It counts eventIds, not messages: ids are not dense.
	Lag int64 `json:"lag"`
}

// Roles of ServerInfo.Role and ReplicationInfo.Role.
const (
	RoleMaster = "master"
	RoleSlave  = "slave"
)

// ReplicationInfo describes replication from this instance's point of view:
// on a master the connected slaves (Slaves), on a slave the link to its
// master (Master).
type ReplicationInfo struct {
	Role        string      `json:"role"`
	LastEventID int64       `json:"lastEventId"`
	Slaves      []SlaveInfo `json:"slaves"`
	Master      *MasterLink `json:"master,omitempty"`
	// Sync is the master's semi-synchronous replication (replication.sync*
	// keys); nil where the process has none (a slave).
	Sync *SyncInfo `json:"sync,omitempty"`
	// ReadCommitted is true when subscribers are served only up to
	// CommitPoint (replication.readCommitted with syncSlaves > 0);
	// HeldByCommit counts the subscribers waiting for it to move.
	ReadCommitted bool  `json:"readCommitted"`
	CommitPoint   int64 `json:"commitPoint"`
	HeldByCommit  int64 `json:"heldByCommit"`
}

// SyncInfo describes semi-synchronous replication on a master.
type SyncInfo struct {
	// SyncSlaves, TimeoutMs and OnTimeout are the configuration
	// (replication.syncSlaves, syncTimeoutMs, onSyncTimeout); SyncSlaves 0
	// is asynchronous replication.
	SyncSlaves int    `json:"syncSlaves"`
	TimeoutMs  int64  `json:"timeoutMs"`
	OnTimeout  string `json:"onTimeout"`
	// Confirming counts the connected slaves that confirm (our smss
	// slaves; an original slave never does).
	Confirming int `json:"confirming"`
	// Confirmed is the highest eventId confirmed by SyncSlaves slaves
	// (0 when fewer confirm).
	Confirmed int64 `json:"confirmed"`
	// Waiting counts the writes whose reply waits for confirmations now.
	Waiting int64 `json:"waiting"`
	// Degraded is true while writes are answered asynchronously after a
	// timeout (onSyncTimeout: degrade), since DegradedSince (ms).
	Degraded      bool  `json:"degraded"`
	DegradedSince int64 `json:"degradedSince,omitempty"`
	// TimeoutsFail and TimeoutsDegrade count the writes not confirmed in
	// time, answered 400 and 200 respectively.
	TimeoutsFail    int64 `json:"timeoutsFail"`
	TimeoutsDegrade int64 `json:"timeoutsDegrade"`
	// Unconfirmed counts the writes answered 200 without the confirmations
	// (degrade mode: timed out, released or served while degraded).
	Unconfirmed int64 `json:"unconfirmed"`
	// Degradations counts the switches to asynchronous.
	Degradations int64 `json:"degradations"`
	// BeforeSync is true when slaves get each write before the master's
	// own fsync (store.flushLevel 2 with syncSlaves): both sync side by
	// side, and the commit point follows the master's synced copy too.
	BeforeSync bool `json:"beforeSync,omitempty"`
}

// SlaveSync is one confirming slave's state in SyncInfo's tracker.
type SlaveSync struct {
	InstanceID     string // hex, as its hello sent it
	Confirmed      int64
	Fsynced        bool
	LatencySeconds float64
	LastConfirm    int64
	Confirms       int64
}

// SlaveInfo is one replica stream served by a master.
type SlaveInfo struct {
	RemoteAddr string `json:"remoteAddr"`
	// Since is when the stream started (ms).
	Since int64 `json:"since"`
	// Position is the last eventId sent to the slave.
	Position int64 `json:"position"`
	// LagEvents is the master's last eventId minus Position.
	LagEvents int64 `json:"lagEvents"`
	// Confirming is true for a slave that confirms what it applied (an
	// smss slave); the fields below are set only then. Confirmed is the
	// last eventId it confirmed, Fsynced whether that is fsynced on it
	// (it runs flushLevel 2), ConfirmLatencySeconds the time from the
	// master's commit of a block (when its stream saw it) to the
	// confirmation of the latest confirmed block, LastConfirm the ms time
	// of the last confirmation.
	Confirming bool `json:"confirming"`
	// InstanceID is the instance id (hex) the slave sent in its hello:
	// the one kept in its data directory's instance.id, so two
	// connections with the same id are one slave restarted, or a copied
	// directory (docs/protocol.md §12.3, slave confirmations).
	InstanceID            string  `json:"instanceId,omitempty"`
	Confirmed             int64   `json:"confirmed,omitempty"`
	Fsynced               bool    `json:"fsynced,omitempty"`
	ConfirmLatencySeconds float64 `json:"confirmLatencySeconds,omitempty"`
	LastConfirm           int64   `json:"lastConfirm,omitempty"`
}

// Slave link states of MasterLink.State.
const (
	LinkConnecting = "connecting" // dialling or syncing topics
	LinkStreaming  = "streaming"  // replica stream open
	LinkRetrying   = "retrying"   // session ended, waiting to reconnect
	LinkStopped    = "stopped"    // replication ended for good
)

// MasterLink is a slave's view of its master.
type MasterLink struct {
	Addr  string `json:"addr"`
	State string `json:"state"`
	// Position is the last eventId applied locally.
	Position int64 `json:"position"`
	// LagEvents is the master's last eventId minus Position when known
	// (for instance from the master's admin API), else -1: the replica
	// stream itself does not carry the master's position.
	LagEvents int64 `json:"lagEvents"`
	// LagSeconds is 0 when the last frame was an alive (the master had
	// nothing newer), else now minus the write time of the last applied
	// block.
	LagSeconds float64 `json:"lagSeconds"`
	// LastContact is the ms time of the last frame received; 0 if none.
	LastContact int64 `json:"lastContact"`
	// LastError is the error that ended the previous session, if any.
	LastError string `json:"lastError,omitempty"`
	// LastBlockAt is the ms time the last block from the master was
	// applied by this process; 0 if none.
	LastBlockAt int64 `json:"lastBlockAt"`
	// QuietMs is how long the stream has brought no block (-1 when not
	// streaming); CaughtUp is true once it was quiet for
	// replication.promoteQuietMs (a promote no longer loses writes the
	// master takes).
	QuietMs  int64 `json:"quietMs"`
	CaughtUp bool  `json:"caughtUp"`
}

// DelayStats summarises the delay queue.
type DelayStats struct {
	Pending int64 `json:"pending"`
	// NextDue is the ms trigger time of the earliest pending message; 0 if
	// none is pending.
	NextDue int64 `json:"nextDue"`
	// Buckets count the pending messages by due time, in the order of
	// DelayBucketBounds plus a final open bucket (WithinMs -1).
	Buckets []DelayBucket `json:"buckets"`
}

// DelayBucket counts the pending delayed messages due after the previous
// bucket's bound and within WithinMs of now (-1: later than every bound).
// Overdue messages fall in the first bucket.
type DelayBucket struct {
	Label    string `json:"label"`
	WithinMs int64  `json:"withinMs"`
	Count    int64  `json:"count"`
}

// DelayBucketBounds are the due-time bucket bounds of DelayStats.
var DelayBucketBounds = []struct {
	Label    string
	WithinMs int64
}{
	{"1m", int64(time.Minute / time.Millisecond)},
	{"10m", int64(10 * time.Minute / time.Millisecond)},
	{"1h", int64(time.Hour / time.Millisecond)},
	{"1d", int64(24 * time.Hour / time.Millisecond)},
	{"7d", int64(7 * 24 * time.Hour / time.Millisecond)},
}

// DelayLaterLabel labels the open last bucket.
const DelayLaterLabel = "later"

// NewDelayStats returns empty DelayStats with every bucket present, to be
// filled with Add while walking the delay queue.
func NewDelayStats() DelayStats {
	b := make([]DelayBucket, 0, len(DelayBucketBounds)+1)
	for _, d := range DelayBucketBounds {
		b = append(b, DelayBucket{Label: d.Label, WithinMs: d.WithinMs})
	}
	b = append(b, DelayBucket{Label: DelayLaterLabel, WithinMs: -1})
	return DelayStats{Buckets: b}
}

// Add counts one pending message due at dueMs, seen at nowMs.
func (s *DelayStats) Add(nowMs, dueMs int64) {
	s.Pending++
	if s.NextDue == 0 || dueMs < s.NextDue {
		s.NextDue = dueMs
	}
	if len(s.Buckets) == 0 {
		*s = mergeFresh(*s)
	}
	in := dueMs - nowMs
	for i := range s.Buckets {
		if w := s.Buckets[i].WithinMs; w < 0 || in <= w {
			s.Buckets[i].Count++
			return
		}
	}
}

// mergeFresh gives a zero DelayStats its buckets while keeping the counts
// already taken (Add on a zero value works).
func mergeFresh(s DelayStats) DelayStats {
	f := NewDelayStats()
	f.Pending, f.NextDue = s.Pending, s.NextDue
	return f
}

// ServerInfo describes the running process.
type ServerInfo struct {
	Version string `json:"version"`
	Role    string `json:"role"`
	// ListenAddr is the client (TCP protocol) address.
	ListenAddr string `json:"listenAddr"`
	DataDir    string `json:"dataDir"`
	// StartTime is the process start (ms).
	StartTime   int64 `json:"startTime"`
	LastEventID int64 `json:"lastEventId"`
	// Epoch is the promotion epoch: grows with every promotion; on a
	// slave, the highest epoch of a master it followed.
	Epoch uint64 `json:"epoch"`
	// BinlogBytes is the size of all binlog files; BinlogFiles their count.
	BinlogBytes int64 `json:"binlogBytes"`
	BinlogFiles int   `json:"binlogFiles"`
	// DedupeIDs is the number of message ids the dedupe window holds
	// (dedupe.window, dedupe.maxIds).
	DedupeIDs int64 `json:"dedupeIds"`
	// Config is the configuration in effect as dotted key → value, with
	// secrets removed (config.Config.Summary does both).
	Config map[string]any `json:"config"`
	// Certificates are the TLS certificates this process presents, as in
	// force now (after any reload); absent when none is configured.
	Certificates []CertificateInfo `json:"certificates,omitempty"`
}

// CertificateInfo is one TLS certificate the process presents.
type CertificateInfo struct {
	// Key is the configuration key naming the certificate file:
	// "tls.cert" (the TLS listener) or "replication.cert" (a slave's
	// client certificate for its master).
	Key     string `json:"key"`
	Subject string `json:"subject"`
	// NotAfter is when the certificate expires (ms).
	NotAfter int64 `json:"notAfter"`
}

// ClusterSource is implemented by the Source of a cluster node (smss -role
// auto); ok false when the node is not one. Cluster is cheap and local (a
// scrape reads it); ClusterReport asks every node of the cluster.
type ClusterSource interface {
	Cluster() (c ClusterInfo, ok bool)
	ClusterReport(ctx context.Context) (r ClusterReportInfo, ok bool)
}

// ClusterInfo is this node's view of its cluster, for the metrics.
type ClusterInfo struct {
	Node       string
	Epoch      uint64
	Version    uint64 // the cluster state's version (consensus log index)
	IsMaster   bool   // the cluster names this node master
	IsLeader   bool   // this node is the consensus (raft) leader
	LeaseValid bool
	Fenced     bool // a master refusing writes (status: cluster.fenced)
	InSync     int  // members of the in-sync set
	// Blocked: the consensus leader's controller holds an action back
	// (false on other nodes).
	Blocked bool
}

// ClusterReportInfo is the body of /api/cluster: the cluster report
// (every node's role, epoch, eventIds, in-sync state) as this node
// gathered it, with this node's own view.
type ClusterReportInfo struct {
	Node       string `json:"node"`
	LeaseValid bool   `json:"leaseValid"`
	protocol.ClusterReport
}
