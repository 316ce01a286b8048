package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/smssmq/smss/binlog"
	"github.com/smssmq/smss/protocol"
)

// ReplicaBlock is one binlog block of a replication stream.
type ReplicaBlock struct {
	binlog.Block
	// Raw is the block exactly as the master stores it.
	Raw []byte
}

// ReplicaStream reads a master's replication stream (docs/protocol.md §4.3), as a slave
// would, for tools and tests. It is not safe for concurrent use, except
// Close.
type ReplicaStream struct {
	nc        net.Conn
	r         *bufio.Reader
	idle      time.Duration
	maxBlock  int
	err       error // sticky: the stream cannot continue after any failure
	closeOnce sync.Once
}

// OpenReplica opens a dedicated connection and asks for every binlog block
// after eventID (the last message id of the last block the caller has; 0
// for everything retained). A refusal by the server is reported by the
// first Next. Blocks larger than Options.MaxReplyBytes end the stream, and
// so does silence (not even an alive) for Options.StreamIdleTimeout.
func (c *Client) OpenReplica(ctx context.Context, eventID int64) (*ReplicaStream, error) {
	// Only a master serves replication: with several addresses, the master.
	i, err := c.target(ctx, true)
	if err != nil {
		return nil, c.wrap("replica", "", err)
	}
	cn, err := dialConn(ctx, &c.opts, c.addrs[i])
	if err != nil {
		return nil, c.wrapAt("replica", "", c.addrs[i], err)
	}
	req, err := protocol.AppendReplica(nil, eventID)
	if err != nil {
		cn.close()
		return nil, c.encodeErr("replica", "", err)
	}
	done := cn.watch(ctx, c.opts.RequestTimeout)
	_, err = cn.nc.Write(req)
	if interrupted := done(); interrupted && err != nil {
		err = ctx.Err()
	}
	if err != nil {
		cn.close()
		return nil, c.wrap("replica", "", fmt.Errorf("send request: %w", err))
	}
	cn.nc.SetDeadline(time.Time{})
	return &ReplicaStream{nc: cn.nc, r: cn.r, idle: c.opts.StreamIdleTimeout, maxBlock: c.opts.MaxReplyBytes}, nil
}

// Next returns the next block, skipping keep-alives. It fails with a
// *ServerError when the master refuses or ends the stream, ctx's error when
// ctx ends, and a network or ErrProtocol error otherwise; after any error
// the stream is finished.
func (s *ReplicaStream) Next(ctx context.Context) (ReplicaBlock, error) {
	if s.err != nil {
		return ReplicaBlock{}, s.err
	}
	stop := context.AfterFunc(ctx, func() { s.nc.SetReadDeadline(aLongTimeAgo) })
	defer stop()
	for {
		s.nc.SetReadDeadline(time.Now().Add(s.idle))
		f, err := protocol.ReadReplicaFrame(s.r, s.maxBlock)
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			} else if errors.Is(err, protocol.ErrUnexpectedStatus) || errors.Is(err, protocol.ErrReplyTooLarge) {
				err = fmt.Errorf("%w: %w", ErrProtocol, err)
			}
			return s.fail(toServerError(err, ""))
		}
		if f.Code == protocol.StatusAlive {
			continue
		}
		b, n, err := binlog.DecodeBlock(f.Body)
		if err == nil && n != len(f.Body) {
			err = fmt.Errorf("%d bytes after the block", len(f.Body)-n)
		}
		if err != nil {
			return s.fail(fmt.Errorf("%w: replica frame: %w", ErrProtocol, err))
		}
		return ReplicaBlock{Block: b, Raw: f.Body}, nil
	}
}

func (s *ReplicaStream) fail(err error) (ReplicaBlock, error) {
	s.err = fmt.Errorf("smss replica: %w", err)
	s.Close()
	return ReplicaBlock{}, s.err
}

// Close ends the stream.
func (s *ReplicaStream) Close() error {
	s.closeOnce.Do(func() { s.nc.Close() })
	return nil
}
