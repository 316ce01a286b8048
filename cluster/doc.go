// Package cluster is smss's automatic failover: an embedded raft group
// (hashicorp/raft, raft-boltdb store) that holds the cluster METADATA only —
// who is master, of which epoch, and the in-sync set (ISR) — and the
// controller that watches the data nodes and changes it. Messages never go
// through raft; they keep flowing on the binlog replica stream. The package
// depends on nothing of the broker, server or replication: the data node
// reaches it through Node (State, Changes, LeaseValid) and it reaches the
// data nodes through a Prober.
//
// Invariants (issue 31, design "automatic failover"):
//
//   - State changes only through the raft log, applied by the FSM (fsm.go,
//     apply in state.go). Apply is deterministic: it reads only the state,
//     the entry and its index, never the local configuration, so every node
//     computes the same state.
//   - Compare-and-set: every command carries the Epoch and Version of the
//     state it was decided on, and the FSM refuses (ErrStale) one whose
//     state has changed since; two controllers in quick succession cannot
//     both elect. Malformed or refused entries are logged and leave the
//     state as it was; nothing reachable from log bytes panics.
//   - Epoch only grows: an Elect's NewEpoch is above the state's epoch (and
//     the controller takes it above every epoch a node reports).
//   - The master is never in the ISR. Only an Eligible ISR member can be
//     elected after the first election (the FSM itself refuses another);
//     the new ISR is the old one minus the elected node.
//   - A member joins in two steps: ISRAdd (not eligible) once it confirmed
//     the master's commit point, then MarkEligible once a master report
//     shows the master adopted a Version >= the member's Added and the
//     member confirmed that report's CommitPoint. A member replaced by
//     another data directory (instance) restarts ineligible.
//   - The controller never shrinks the ISR below MinISR.
//   - Election (controller.go): only when the master has been unhealthy
//     (unreachable, not master, or of another epoch) continuously for
//     FailAfter, counted from this controller's start at the earliest;
//     among the reachable Eligible ISR members whose instance matches, the
//     highest LastEventID, then the lowest id. None: no election, and
//     ControllerStatus.Blocked says why (logged once per change).
//   - Bootstrap: the first master is elected only once every peer
//     answered a probe: the highest LastEventID, then the lowest id.
//   - The controller acts only on the raft leader, after a barrier (its
//     state includes every committed entry), one command in flight at a
//     time, and never waits for a probe beyond ProbeTimeout. After that
//     barrier and after each command it pushes the commit to the
//     followers (one more barrier entry), so that their States follow
//     within a round trip: raft's own commit-only appends go only every
//     HeartbeatTimeout (CommitTimeout), which keeps an idle cluster cheap.
//   - The raft leader heartbeats every HeartbeatTimeout/5..HeartbeatTimeout/2.5
//     (raft's HeartbeatTimeout doubled while it leads), half raft's rate;
//     a follower still starts an election after HeartbeatTimeout of silence.
//   - Lease: LeaseValid is true only if this node heard from a raft quorum
//     within Lease (leader: a VerifyLeader started within Lease succeeded;
//     follower: the leader's last contact is within Lease). FailAfter >
//     Lease, so a master cut off from the quorum has stopped acknowledging
//     before another one can be elected.
//
// Raft store: Options.Dir holds raft.db (bolt log and stable store) and
// snapshots/. The peer set is bootstrapped from the configuration on a
// first start and then kept by raft: a later change of the configured peers
// is only logged (membership changes are not implemented). Three voters
// survive one failure, five survive two.
//
// The raft transport is plain TCP unless Options.ServerTLS/ClientTLS are
// set; plain TCP authenticates nobody, so whoever reaches a raft port can
// take part in the consensus: use mutual TLS (ClientAuth
// RequireAndVerifyClientCert) or a closed network. Under TLS the listener
// completes each handshake before raft sees the connection (a refused one
// is logged, rate-limited, and closed), and CurrentClientTLS lets a
// reloaded client certificate serve the next dial. smss -role auto builds
// both from the tls.* and replication.* keys (cmd/smss/clustertls.go).
package cluster
