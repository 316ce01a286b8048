package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"
)

// Peer is one voting member of the cluster.
type Peer struct {
	ID string
	// Raft is the host:port the node's raft transport listens on and the
	// others dial.
	Raft string
	// Addr is the node's smss address (what the Prober dials).
	Addr string
}

// Report is what a Prober learnt of one node (decoded from its smss
// status).
type Report struct {
	Role        string // RoleMaster or RoleSlave
	Epoch       uint64 // the epoch the node knows
	LastEventID int64  // the last eventId in its binlog
	Instance    string // its data directory's instance id (12 hex digits)

	// On a master only:
	// Fenced is why the master refuses writes, "" when it answers them. A
	// master that lost its consensus lease says so here while it is still
	// reachable by the controller (its raft links cut, its smss port not):
	// the controller must not take it for healthy.
	Fenced string
	// CommitPoint is at least every eventId the master answered 200 (its
	// last eventId will do).
	CommitPoint int64
	// AdoptedVersion is the State.Version whose ISR the master enforces.
	AdoptedVersion uint64
	Slaves         []SlaveReport
}

// Roles a Report gives.
const (
	RoleMaster = "master"
	RoleSlave  = "slave"
)

// SlaveReport is a master's view of one connected (or known) slave.
type SlaveReport struct {
	Instance  string
	Connected bool
	Confirmed int64 // the last eventId the slave confirmed
	// LagMs is the age of the oldest write the slave has not confirmed
	// yet, 0 if none.
	LagMs int64
}

// Prober asks one node for its status. The controller calls it for every
// peer at once (it must be safe for concurrent use), this node included.
// It should return when ctx is done; the controller in any case stops
// waiting for it then.
type Prober interface {
	Probe(ctx context.Context, p Peer) (Report, error)
}

// Options configure Open. DefaultOptions gives the timings; NodeID, Peers,
// Dir and Prober have no default.
type Options struct {
	NodeID string
	Peers  []Peer
	// Dir holds the raft store: raft.db (log and stable store) and the
	// snapshots directory.
	Dir string
	// MinISR is the smallest ISR the controller shrinks to
	// (replication.syncSlaves; >= 1).
	MinISR int

	// FailAfter: the master unreachable (or not master of the current
	// epoch) this long makes the controller elect another; it must exceed
	// Lease, so that the old master stopped acknowledging by then.
	FailAfter time.Duration
	// ProbeInterval is the period of the controller's probes of every
	// node; ProbeTimeout bounds each probe.
	ProbeInterval, ProbeTimeout time.Duration
	// Lease: how recent this node's contact with a raft quorum must be
	// for LeaseValid.
	Lease time.Duration
	// ISRLag: a member the master reports disconnected, or with an
	// unconfirmed write older than this, for this long leaves the ISR.
	ISRLag time.Duration
	// SwitchoverWait bounds how long Switchover waits for its target to
	// catch up when the caller's context has no earlier deadline.
	SwitchoverWait time.Duration

	// Raft's own timings (raft.Config): HeartbeatTimeout without a leader
	// makes a follower start an election; ElectionTimeout bounds a
	// candidate's wait. raft's LeaderLeaseTimeout is the smaller of
	// HeartbeatTimeout and Lease.
	HeartbeatTimeout, ElectionTimeout time.Duration

	Prober Prober
	// ServerTLS and ClientTLS, both set or both nil, put the raft
	// transport under TLS: ServerTLS for the listener (set ClientAuth to
	// require peer certificates), ClientTLS for dialing (ServerName is
	// filled with the peer's host when empty). nil: plain TCP, which has
	// no authentication at all: keep the raft port on a trusted network.
	ServerTLS, ClientTLS *tls.Config
	// CurrentClientTLS, when set (with ClientTLS), is called at every
	// dial for the client configuration in force, so that a reload of the
	// client certificate or CAs takes effect on the next connection;
	// ClientTLS is then only what says TLS is on. The server side reloads
	// through ServerTLS's own callbacks (GetConfigForClient,
	// GetCertificate).
	CurrentClientTLS func() *tls.Config

	// Logger receives the cluster's and raft's logs (slog.Default if nil).
	Logger *slog.Logger
}

// Defaults of DefaultOptions (and of the config keys of the cluster
// section, which must agree: config.DefaultCluster).
const (
	DefaultFailAfter        = 2000 * time.Millisecond
	DefaultProbeInterval    = 250 * time.Millisecond
	DefaultProbeTimeout     = 500 * time.Millisecond
	DefaultLease            = 1000 * time.Millisecond
	DefaultISRLag           = 1000 * time.Millisecond
	DefaultSwitchoverWait   = 10 * time.Second
	DefaultHeartbeatTimeout = 500 * time.Millisecond
	DefaultElectionTimeout  = 500 * time.Millisecond
)

// DefaultOptions returns the default timings, chosen so that a failover on
// a LAN takes about HeartbeatTimeout..2·HeartbeatTimeout (raft leader lost)
// + FailAfter + ProbeInterval: under 3.5 s, within the 5 s p99 goal.
func DefaultOptions() Options {
	return Options{
		MinISR:           1,
		FailAfter:        DefaultFailAfter,
		ProbeInterval:    DefaultProbeInterval,
		ProbeTimeout:     DefaultProbeTimeout,
		Lease:            DefaultLease,
		ISRLag:           DefaultISRLag,
		SwitchoverWait:   DefaultSwitchoverWait,
		HeartbeatTimeout: DefaultHeartbeatTimeout,
		ElectionTimeout:  DefaultElectionTimeout,
	}
}

// ErrOptions is wrapped by Open's refusal of invalid options.
var ErrOptions = errors.New("cluster: invalid options")

func (o *Options) check() error {
	err := o.checkSettings()
	if o.Prober == nil {
		err = errors.Join(err, fmt.Errorf("%w: no Prober", ErrOptions))
	}
	return err
}

// checkSettings checks everything but the Prober.
func (o *Options) checkSettings() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrOptions, fmt.Sprintf(format, args...)))
	}
	ids, rafts := map[string]bool{}, map[string]string{}
	for _, p := range o.Peers {
		if err := checkNodeID(p.ID); err != nil {
			bad("peer: %v", err)
		}
		if ids[p.ID] {
			bad("peer %s listed twice", p.ID)
		}
		ids[p.ID] = true
		if _, _, err := net.SplitHostPort(p.Raft); err != nil {
			bad("peer %s: raft address %q: %v", p.ID, p.Raft, err)
		}
		if other, dup := rafts[p.Raft]; dup {
			bad("peers %s and %s share the raft address %s", other, p.ID, p.Raft)
		}
		rafts[p.Raft] = p.ID
	}
	if !ids[o.NodeID] {
		bad("node %q is not one of the peers", o.NodeID)
	}
	if o.Dir == "" {
		bad("no directory")
	}
	if o.MinISR < 1 {
		bad("MinISR %d < 1", o.MinISR)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"FailAfter", o.FailAfter}, {"ProbeInterval", o.ProbeInterval}, {"ProbeTimeout", o.ProbeTimeout},
		{"Lease", o.Lease}, {"ISRLag", o.ISRLag}, {"SwitchoverWait", o.SwitchoverWait},
		{"HeartbeatTimeout", o.HeartbeatTimeout}, {"ElectionTimeout", o.ElectionTimeout}} {
		if d.v < 5*time.Millisecond {
			bad("%s %v is below 5ms", d.name, d.v)
		}
	}
	if o.FailAfter <= o.Lease {
		bad("FailAfter %v must exceed Lease %v (an old master must stop acknowledging before another is elected)", o.FailAfter, o.Lease)
	} else if o.FailAfter <= o.Lease+o.ProbeTimeout {
		// The master counts as unhealthy from when the failing probe was
		// sent, up to ProbeTimeout before the failure shows.
		bad("FailAfter %v must exceed Lease %v + ProbeTimeout %v (an old master must stop acknowledging before another is elected)", o.FailAfter, o.Lease, o.ProbeTimeout)
	}
	if o.ElectionTimeout < o.HeartbeatTimeout {
		bad("ElectionTimeout %v must be >= HeartbeatTimeout %v", o.ElectionTimeout, o.HeartbeatTimeout)
	}
	if (o.ServerTLS == nil) != (o.ClientTLS == nil) {
		bad("ServerTLS and ClientTLS must be set together")
	}
	if o.CurrentClientTLS != nil && o.ClientTLS == nil {
		bad("CurrentClientTLS needs ClientTLS and ServerTLS")
	}
	return errors.Join(errs...)
}

func (o *Options) peer(id string) (Peer, bool) {
	for _, p := range o.Peers {
		if p.ID == id {
			return p, true
		}
	}
	return Peer{}, false
}
