package server

import "github.com/smssmq/smss/replication"

// replica serves a replica request (64): the connection becomes a binlog
// stream until the slave leaves; false closes the connection.
func (c *conn) replica() bool {
	if !c.s.setState(c, stateStream) {
		return false
	}
	reuse, _ := replication.ServeMaster(c.s.ctx, c.nc, c.br, c.s.opts.Replication, c.req.EventID,
		replication.MasterOptions{AliveInterval: c.s.opts.AliveInterval, Logger: c.log})
	return reuse
}
