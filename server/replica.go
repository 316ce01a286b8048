package server

import (
	"errors"
	"time"

	"github.com/smssmq/smss/metrics"
	"github.com/smssmq/smss/protocol"
	"github.com/smssmq/smss/replication"
)

// replica serves a replica request (64): the connection becomes a binlog
// stream until the slave leaves; false closes the connection.
func (c *conn) replica(start time.Time) bool {
	if !c.s.setState(c, stateStream) {
		return false
	}
	src := &replicaSource{Source: c.s.opts.Replication, c: c, start: start}
	reuse, err := replication.ServeMaster(c.s.ctx, c.nc, c.br, src, c.req.EventID,
		replication.MasterOptions{AliveInterval: c.s.opts.AliveInterval, Linger: c.s.opts.ReplicaLinger, Logger: c.log,
			Sync: c.s.opts.Sync, Epoch: c.s.opts.ReplicaEpoch, OnEpoch: c.s.opts.OnSlaveEpoch})
	if src.opened && err != nil && !errors.Is(err, replication.ErrSlaveGone) && !c.s.isShutting() {
		c.s.opts.Metrics.Error(metrics.KindReplication)
	}
	return reuse
}

// replicaSource is the server's replication.Source for one connection: it
// times the request up to the stream's start and names the slave's address
// on the stream for operators.
type replicaSource struct {
	replication.Source
	c      *conn
	start  time.Time
	opened bool
}

func (s *replicaSource) ReplicaStream(after int64) (replication.Stream, error) {
	st, err := s.Source.ReplicaStream(after)
	m := s.c.s.opts.Metrics
	m.ObserveRequest(protocol.CmdReplica, time.Since(s.start), err == nil)
	if err != nil {
		if protocol.IsBizError(err) {
			m.Error(metrics.KindBusiness)
		}
		return nil, err
	}
	s.opened = true
	if rn, ok := st.(remoteNamer); ok {
		rn.SetRemoteAddr(s.c.nc.RemoteAddr().String())
	}
	return st, nil
}
