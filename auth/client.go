package auth

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/xdg-go/scram"

	"github.com/smssmq/smss/protocol"
)

// ErrServerProof means the server's final message did not prove that it
// holds the user's credentials: it may be an impostor.
var ErrServerProof = errors.New("server signature invalid")

// Client logs in as one user. It caches the PBKDF2 result per salt and
// iteration count, so only the first handshake of a process pays for the
// key derivation; it is safe for concurrent use.
type Client struct {
	user string
	sc   *scram.Client
}

// NewClient prepares logins as user with password (normalised with
// SASLprep, as the server's credentials were).
func NewClient(user, password string) (*Client, error) {
	if user == "" {
		return nil, errors.New("auth: empty user name")
	}
	if password == "" {
		return nil, errors.New("auth: empty password")
	}
	sc, err := scram.SHA256.NewClient(user, password, "")
	if err != nil {
		// The scram error may quote the user name, never the password.
		return nil, fmt.Errorf("auth: %w", err)
	}
	return &Client{user: user, sc: sc.WithMinIterations(MinIterations)}, nil
}

// User is the user name logins use.
func (c *Client) User() string { return c.user }

// Login runs the handshake on rw, a connection with nothing else in flight,
// reading exactly the reply bytes (rw may be unbuffered; nothing is read
// ahead). Errors: a *protocol.BizError when the server refused (its text,
// e.g. protocol.ErrAuthFailed, or protocol.ErrNotSupported from a server
// without authentication support), ErrServerProof, or an I/O error. The
// caller bounds the time with the connection's deadline.
func (c *Client) Login(rw io.ReadWriter) error {
	conv := c.sc.NewConversation()
	first, err := conv.Step("")
	if err != nil {
		return fmt.Errorf("auth: client-first-message: %w", err)
	}
	req, err := protocol.AppendAuthStart(nil, protocol.MechSCRAMSHA256, []byte(first))
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	serverFirst, err := exchange(rw, req)
	if err != nil {
		return err
	}
	if err := checkIterations(string(serverFirst)); err != nil {
		return err
	}
	final, err := conv.Step(string(serverFirst))
	if err != nil {
		return fmt.Errorf("auth: server-first-message: %w", err)
	}
	req, err = protocol.AppendAuthContinue(nil, []byte(final))
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	serverFinal, err := exchange(rw, req)
	if err != nil {
		return err
	}
	if _, err := conv.Step(string(serverFinal)); err != nil || !conv.Valid() {
		return fmt.Errorf("auth: %w", ErrServerProof)
	}
	return nil
}

func exchange(rw io.ReadWriter, req []byte) ([]byte, error) {
	if _, err := rw.Write(req); err != nil {
		return nil, fmt.Errorf("auth: write: %w", err)
	}
	body, err := protocol.ReadReply(rw, protocol.ReplyJSON, protocol.MaxAuthMessage)
	if err != nil {
		if protocol.IsBizError(err) {
			return nil, err
		}
		return nil, fmt.Errorf("auth: read reply: %w", err)
	}
	return body, nil
}

// checkIterations refuses a server-first-message asking for more PBKDF2
// iterations than MaxIterations: the client would spin for minutes.
func checkIterations(serverFirst string) error {
	for _, attr := range strings.Split(serverFirst, ",") {
		if v, ok := strings.CutPrefix(attr, "i="); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n > MaxIterations {
				return fmt.Errorf("auth: server asks for %q iterations (max %d)", v, MaxIterations)
			}
			return nil
		}
	}
	return nil // the scram parser reports the missing attribute
}
