package security

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	smssclient "github.com/smssmq/smss/client"
	"github.com/smssmq/smss/e2e/internal/kit"
)

// A Go client publishing more than limit.maxPayload writes its whole body
// and then reads the server's reason (not "broken pipe"); the connection
// stays usable. (Beyond limit.maxDiscard the server closes at once:
// server.TestOversizeBodyRefusalIsReadable.)
func TestPublishOverLimitGetsTheReason(t *testing.T) {
	dir := t.TempDir()
	kit.WriteConfig(t, dir, "limit:\n  maxPayload: 1024\n  maxDiscard: 8388608\n")
	p := kit.Start(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := smssclient.Dial(ctx, p.Addr, smssclient.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTopic(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		size int
	}{
		{"just over", 1100},
		{"discarded", 512 << 10},
		// Without the discard this one fails with "broken pipe": the
		// client is still writing when the server closes.
		{"larger than the socket buffers", 4 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Publish(ctx, "t", smssclient.NewMessage(make([]byte, tc.size)))
			var se *smssclient.ServerError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), "exceeds limit.maxPayload 1024") {
				t.Fatalf("publish of %d bytes: %v (%T), want the server's 400", tc.size, err, err)
			}
			// The next request works (on the same connection when it was
			// kept, else on a new one).
			if err := c.Publish(ctx, "t", smssclient.NewMessage([]byte("small"))); err != nil {
				t.Fatalf("publish after the refusal: %v", err)
			}
		})
	}
}
