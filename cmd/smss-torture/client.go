package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/smssmq/smss/protocol"
)

const (
	dialTimeout    = 2 * time.Second
	requestTimeout = 15 * time.Second
	maxReply       = 64 << 20
)

// wire is one raw protocol connection.
type wire struct {
	c net.Conn
	r *bufio.Reader
}

func dialWire(addr string) (*wire, error) {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return nil, err
	}
	return &wire{c: c, r: bufio.NewReaderSize(c, 64<<10)}, nil
}

func (w *wire) close() { w.c.Close() }

// roundTrip sends one request and reads its reply. A *protocol.BizError is
// a refusal (the request had no effect and the connection is usable); any
// other error leaves the outcome unknown and the connection unusable.
func (w *wire) roundTrip(req []byte, kind protocol.ReplyKind) ([]byte, error) {
	if err := w.c.SetDeadline(time.Now().Add(requestTimeout)); err != nil {
		return nil, err
	}
	if _, err := w.c.Write(req); err != nil {
		return nil, err
	}
	return protocol.ReadReply(w.r, kind, maxReply)
}

// outcome classifies the result of a write request.
type outcome uint8

const (
	inFlight outcome = iota
	acked            // 200: the write must be stored exactly once
	refused          // 400: the write must not be stored
	unknown          // no reply: stored at most once
)

func (o outcome) String() string {
	return [...]string{"in flight", "acknowledged", "refused", "unknown"}[o]
}

func classify(err error) outcome {
	if err == nil {
		return acked
	}
	var be *protocol.BizError
	if errors.As(err, &be) {
		return refused
	}
	return unknown
}

// listedTopic is the part of a list (100) entry the checks compare.
type listedTopic struct {
	Name          string `json:"name"`
	ExpireAt      int64  `json:"expireAt"`
	CreateEventID int64  `json:"createEventId"`
}

// listTopics asks a server for its topic list (the meta store's view).
func listTopics(addr string) (map[string]listedTopic, error) {
	w, err := dialWire(addr)
	if err != nil {
		return nil, err
	}
	defer w.close()
	req, err := protocol.AppendList(nil, nil)
	if err != nil {
		return nil, err
	}
	body, err := w.roundTrip(req, protocol.ReplyJSON)
	if err != nil {
		return nil, fmt.Errorf("list on %s: %w", addr, err)
	}
	var list []listedTopic
	if len(body) > 0 {
		if err := json.Unmarshal(body, &list); err != nil {
			return nil, fmt.Errorf("list on %s: %w", addr, err)
		}
	}
	out := make(map[string]listedTopic, len(list))
	for _, t := range list {
		out[t.Name] = t
	}
	// list (100) leaves out the server's stored positions topic; topic
	// info (65) shows it.
	req, err = protocol.AppendTopicInfo(nil, []byte(protocol.CursorTopic), nil)
	if err != nil {
		return nil, err
	}
	body, err = w.roundTrip(req, protocol.ReplyJSON)
	if err == nil && len(body) > 0 {
		var t listedTopic
		if err := json.Unmarshal(body, &t); err != nil {
			return nil, fmt.Errorf("info %s on %s: %w", protocol.CursorTopic, addr, err)
		}
		out[t.Name] = t
	} else if err != nil && !strings.Contains(err.Error(), protocol.ErrTopicNotExist.Msg) {
		return nil, fmt.Errorf("info %s on %s: %w", protocol.CursorTopic, addr, err)
	}
	return out, nil
}
