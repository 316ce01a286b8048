package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/xdg-go/scram"

	"github.com/smssmq/smss/protocol"
)

// Failure is a failed handshake step. Client is the 400 text sent to the
// peer (protocol.ErrAuthFailed unless the peer proved the password); Reason
// is for the server log and never contains secret material.
type Failure struct {
	Client *protocol.BizError
	User   string // claimed user name, "" if none could be parsed
	Reason string
}

func (f *Failure) Error() string {
	if f.User == "" {
		return "authentication failed: " + f.Reason
	}
	return fmt.Sprintf("authentication of %q failed: %s", f.User, f.Reason)
}

// Authenticator runs the server side of SCRAM-SHA-256 against a Store and
// rate-limits failures with a Limiter.
type Authenticator struct {
	Store   *Store
	Limiter *Limiter
	// fakeKey derives the salt and keys presented for unknown users, so
	// that the server-first-message looks the same whether the user exists
	// or not (no user enumeration), and stays the same across attempts.
	fakeKey []byte
}

// NewAuthenticator returns an Authenticator; lim nil means no rate limit.
func NewAuthenticator(store *Store, lim *Limiter) (*Authenticator, error) {
	if store == nil {
		return nil, errors.New("auth: NewAuthenticator needs a Store")
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("auth: random key: %w", err)
	}
	return &Authenticator{Store: store, Limiter: lim, fakeKey: key}, nil
}

// Conversation is one handshake between its first and final step. It is
// used by one connection goroutine.
type Conversation struct {
	a    *Authenticator
	conv *scram.ServerConversation
	// principal is what the lookup returned: nil for an unknown user.
	principal *Principal
	user      string
}

// User is the user name the client claimed.
func (c *Conversation) User() string { return c.user }

// Start answers a client-first-message with the server-first-message.
func (a *Authenticator) Start(mechanism string, clientFirst []byte) (*Conversation, []byte, error) {
	if mechanism != protocol.MechSCRAMSHA256 {
		return nil, nil, &Failure{Client: protocol.ErrAuthMechanism, Reason: fmt.Sprintf("mechanism %q", mechanism)}
	}
	c := &Conversation{a: a}
	srv, err := scram.SHA256.NewServer(c.lookup)
	if err != nil {
		return nil, nil, &Failure{Client: protocol.ErrAuthFailed, Reason: "scram server: " + err.Error()}
	}
	c.conv = srv.NewConversation()
	out, err := c.conv.Step(string(clientFirst))
	if err != nil {
		return nil, nil, &Failure{Client: protocol.ErrAuthFailed, User: c.user, Reason: "malformed client-first-message"}
	}
	if c.user == "" {
		// lookup was not reached: cannot happen after a successful step,
		// but never authenticate an unnamed conversation.
		return nil, nil, &Failure{Client: protocol.ErrAuthFailed, Reason: "no user name"}
	}
	if az := c.conv.AuthzID(); az != "" && az != c.user {
		return nil, nil, &Failure{Client: protocol.ErrAuthFailed, User: c.user, Reason: "authorization identity differs from the user"}
	}
	return c, []byte(out), nil
}

// lookup is the scram credential callback. Unknown users get deterministic
// fake credentials whose proof can never verify.
func (c *Conversation) lookup(name string) (scram.StoredCredentials, error) {
	c.user = name
	snap := c.a.Store.cur.Load()
	if p := snap.users[name]; p != nil {
		c.principal = p
		return scram.StoredCredentials{
			KeyFactors: scram.KeyFactors{Salt: string(p.creds.Salt), Iters: p.creds.Iterations},
			StoredKey:  p.creds.StoredKey,
			ServerKey:  p.creds.ServerKey,
		}, nil
	}
	return scram.StoredCredentials{
		KeyFactors: scram.KeyFactors{Salt: string(c.a.fake("salt", name)[:saltLen]), Iters: snap.fakeIters},
		StoredKey:  c.a.fake("stored", name),
		ServerKey:  c.a.fake("server", name),
	}, nil
}

func (a *Authenticator) fake(label, name string) []byte {
	m := hmac.New(sha256.New, a.fakeKey)
	m.Write([]byte(label))
	m.Write([]byte{0})
	m.Write([]byte(name))
	return m.Sum(nil)
}

// Finish verifies the client-final-message and returns the authenticated
// principal and the server-final-message (which proves to the client that
// the server holds its credentials).
func (c *Conversation) Finish(clientFinal []byte) (*Principal, []byte, error) {
	out, err := c.conv.Step(string(clientFinal))
	switch {
	case err != nil || !c.conv.Valid():
		reason := "invalid proof or nonce"
		if c.principal == nil {
			reason = "unknown user"
		}
		return nil, nil, &Failure{Client: protocol.ErrAuthFailed, User: c.user, Reason: reason}
	case c.principal == nil:
		// Unreachable: fake keys cannot verify. Refuse all the same.
		return nil, nil, &Failure{Client: protocol.ErrAuthFailed, User: c.user, Reason: "unknown user"}
	}
	// The proof was checked against the snapshot of Start; a reload in
	// between may have disabled or removed the user.
	p := c.a.Store.Lookup(c.user)
	switch {
	case p == nil:
		return nil, nil, &Failure{Client: protocol.ErrAuthFailed, User: c.user, Reason: "user removed during the handshake"}
	case p.Identity() != c.principal.Identity():
		// Re-created or given a new password in between: the proof is for
		// the old account and must not log in as the new one.
		return nil, nil, &Failure{Client: protocol.ErrAuthFailed, User: c.user, Reason: "credentials changed during the handshake"}
	case p.Disabled:
		return nil, nil, &Failure{Client: protocol.NewBizError(fmt.Sprintf("authentication failed: user %q is disabled", c.user)),
			User: c.user, Reason: "user disabled"}
	}
	return p, []byte(out), nil
}
