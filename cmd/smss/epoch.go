package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smssmq/smss/broker"
	"github.com/smssmq/smss/client"
	"github.com/smssmq/smss/protocol"
)

// maxStatusReply caps the status reply a slave reads from its master and a
// cluster's controller from a node: a few hundred bytes, a few kilobytes
// for a cluster's consensus leader (its probes of every node).
const maxStatusReply = 64 << 10

// epochProbe asks a slave's master for its promotion epoch (the status
// command, 34) over a short connection of its own, made with the
// replication dialer (TLS and login as configured), and records it in the
// broker (LearnEpoch) so that a later promotion numbers itself above every
// master this node followed. An original master answers "don't support
// action" and closes the connection: it has no epoch, and that is not an
// error. At most one probe runs at a time.
type epochProbe struct {
	ctx     context.Context // the runner's: ends with it
	dial    client.DialFunc
	addr    string
	b       *broker.Broker
	timeout time.Duration
	log     *slog.Logger

	running atomic.Bool
	wg      sync.WaitGroup
	// known is the last epoch the master reported, -1 (or 0 before any
	// answer) when it has none.
	known atomic.Int64
}

// probe starts a query unless one is running.
func (p *epochProbe) probe() {
	if !p.running.CompareAndSwap(false, true) {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.running.Store(false)
		p.run()
	}()
}

// wait returns when no query is running any more (the runner stopped).
func (p *epochProbe) wait() { p.wg.Wait() }

func (p *epochProbe) run() {
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	st, err := queryStatus(ctx, p.dial, p.addr)
	switch {
	case errors.Is(err, client.ErrNotSupported):
		p.known.Store(-1)
		p.log.Debug("the master has no status command (an original smss): no promotion epoch to learn")
		return
	case err != nil:
		if p.ctx.Err() == nil {
			p.log.Info("could not ask the master's promotion epoch; asking again next session", "err", err)
		}
		return
	}
	p.known.Store(int64(min(st.Epoch, 1<<62)))
	if st.Role != client.RoleMaster {
		p.log.Warn("the node this slave follows says it is not a master", "role", st.Role, "itsMaster", st.Master)
	}
	if _, err := p.b.LearnEpoch(ctx, st.Epoch); err != nil && !errors.Is(err, broker.ErrNotSlave) {
		p.log.Warn("could not record the master's promotion epoch", "epoch", st.Epoch, "err", err)
	}
	// The master's epoch history describes this slave's binlog too (a
	// prefix of the master's); a master that reports none (an older
	// build, or one never promoted) leaves the slave's own.
	if len(st.Epochs) > 0 {
		if _, err := p.b.LearnEpochStarts(ctx, st.Epochs); err != nil && !errors.Is(err, broker.ErrNotSlave) {
			p.log.Warn("could not record the master's epoch history", "entries", len(st.Epochs), "err", err)
		}
	}
}

// queryStatus sends one status request on a fresh connection.
func queryStatus(ctx context.Context, dial client.DialFunc, addr string) (*client.NodeStatus, error) {
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		if err := nc.SetDeadline(dl); err != nil {
			return nil, err
		}
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	req, err := protocol.AppendStatus(nil, nil)
	if err != nil {
		return nil, err
	}
	if _, err := nc.Write(req); err != nil {
		return nil, err
	}
	body, err := protocol.ReadReply(nc, protocol.ReplyJSON, maxStatusReply)
	var be *protocol.BizError
	if errors.As(err, &be) && be.Msg == protocol.ErrNotSupported.Msg {
		return nil, client.ErrNotSupported
	}
	if err != nil {
		return nil, err
	}
	return client.ParseNodeStatus(body)
}
