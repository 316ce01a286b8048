package kit

import (
	"strings"
	"testing"
	"time"

	"github.com/smssmq/smss/auth"
	"github.com/smssmq/smss/internal/smsstest"
)

// Login runs the SCRAM handshake on a fresh connection.
func (c *Client) Login(t *testing.T, user, password string) error {
	t.Helper()
	cl, err := auth.NewClient(user, password)
	if err != nil {
		t.Fatal(err)
	}
	return cl.Login(c.C)
}

// WaitLog waits until the server log holds n occurrences of s.
func (p *Proc) WaitLog(t *testing.T, s string, n int) {
	t.Helper()
	if !smsstest.Poll(20*time.Second, func() bool { return strings.Count(p.Out.String(), s) >= n }) {
		t.Fatalf("the log did not show %q %d times:\n%s", s, n, Tail(p.Out.String(), 4000))
	}
}
