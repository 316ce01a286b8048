package client

import (
	"bufio"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/client/internal/testserver"
)

// TestMessageIDs publishes against a real server and reads back the
// stored headers: by default every call's first message carries a fresh
// 32-hex id, a caller's id is kept, and DisableMessageIDs sends none.
func TestMessageIDs(t *testing.T) {
	srv := testserver.Start(t, fastAlive)
	callerID := strings.Repeat("k", MaxMessageIDLen)
	for _, tc := range []struct {
		name string
		opts Options
		// publish makes the calls; the topic then holds want messages
		publish func(c *Client, topic string) error
		check   func(t *testing.T, ids []string)
	}{
		{
			name: "default: one fresh id per call, on the first message only",
			publish: func(c *Client, topic string) error {
				ctx := ctxT(t, 10*time.Second)
				if err := c.Publish(ctx, topic, NewMessage([]byte("a"))); err != nil {
					return err
				}
				if err := c.PublishBatch(ctx, topic, []*Message{NewMessage([]byte("b")), NewMessage([]byte("c"))}); err != nil {
					return err
				}
				return c.Publish(ctx, topic, NewMessage([]byte("d")))
			},
			check: func(t *testing.T, ids []string) {
				if len(ids) != 4 || ids[2] != "" {
					t.Fatalf("ids %q: want 4 messages, none on the batch's second", ids)
				}
				for _, i := range []int{0, 1, 3} {
					if !isMessageID(ids[i]) {
						t.Errorf("message %d id %q is not 32 lowercase hex characters", i, ids[i])
					}
				}
				if ids[0] == ids[1] || ids[1] == ids[3] || ids[0] == ids[3] {
					t.Errorf("ids repeat across calls: %q", ids)
				}
			},
		},
		{
			name: "caller's id is kept, the message is not modified",
			publish: func(c *Client, topic string) error {
				m := NewMessage([]byte("a")).SetHeader(MessageIDHeader, callerID)
				if err := c.Publish(ctxT(t, 10*time.Second), topic, m); err != nil {
					return err
				}
				plain := NewMessage([]byte("b"))
				if err := c.Publish(ctxT(t, 10*time.Second), topic, plain); err != nil {
					return err
				}
				if len(plain.Headers) != 0 {
					t.Errorf("the caller's message was given headers: %v", plain.Headers)
				}
				return nil
			},
			check: func(t *testing.T, ids []string) {
				if len(ids) != 2 || ids[0] != callerID || !isMessageID(ids[1]) {
					t.Errorf("ids %q, want the caller's then a generated one", ids)
				}
			},
		},
		{
			name: "ids off: no header",
			opts: Options{DisableMessageIDs: true},
			publish: func(c *Client, topic string) error {
				ctx := ctxT(t, 10*time.Second)
				if err := c.Publish(ctx, topic, NewMessage([]byte("a"))); err != nil {
					return err
				}
				return c.PublishBatch(ctx, topic, []*Message{NewMessage([]byte("b")), NewMessage([]byte("c"))})
			},
			check: func(t *testing.T, ids []string) {
				if !slices.Equal(ids, []string{"", "", ""}) {
					t.Errorf("ids %q, want none", ids)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialT(t, srv.Addr, tc.opts)
			topic := strings.NewReplacer(" ", "-", ":", "", ",", "").Replace(tc.name)
			if err := c.CreateTopic(ctxT(t, 10*time.Second), topic); err != nil {
				t.Fatal(err)
			}
			if err := tc.publish(c, topic); err != nil {
				t.Fatal(err)
			}
			tc.check(t, msgIDs(topicMessages(t, srv.Addr, topic)))
		})
	}
}

// TestInvalidMessageIDRefusedLocally: a caller's empty or over-long id is
// refused before anything is sent.
func TestInvalidMessageIDRefusedLocally(t *testing.T) {
	var d writeCountingDialer
	f := startFake(t, func(c net.Conn, r *bufio.Reader) { readReq(r) })
	c := dialT(t, f.addr(), Options{DialContext: d.dial, HealthCheckInterval: -1})
	for _, id := range []string{"", strings.Repeat("x", MaxMessageIDLen+1)} {
		m := NewMessage([]byte("a")).SetHeader(MessageIDHeader, id)
		err := c.Publish(ctxT(t, 5*time.Second), "t", m)
		if !errors.Is(err, ErrInvalidMessageID) {
			t.Errorf("id of %d bytes: %v, want ErrInvalidMessageID", len(id), err)
		}
	}
	if n := d.writes.Load(); n != 0 {
		t.Errorf("%d requests written", n)
	}
}
