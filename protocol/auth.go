package protocol

import "fmt"

// Authentication handshake commands (an extension of docs/protocol.md §1.3; see the
// "Authentication handshake" section of doc.go). Both use the pub framing:
// header bytes 3..6 hold the uint32 LE body length, so any server that knows
// pub's layout can skip them, and an original server answers "don't support
// action".
const (
	// CmdAuthStart carries the SASL mechanism name in the topic field and
	// the SCRAM client-first-message as its body.
	CmdAuthStart Command = 32
	// CmdAuthContinue carries the SCRAM client-final-message as its body.
	CmdAuthContinue Command = 33
)

// MechSCRAMSHA256 is the only mechanism the server offers (RFC 7677).
const MechSCRAMSHA256 = "SCRAM-SHA-256"

// MaxAuthMessage caps the body of an auth request and of its reply (a 200
// with the JSON layout: uint32 length at bytes 2..5, then the SCRAM server
// message; clients read it with ReadReply(r, ReplyJSON, MaxAuthMessage)). SCRAM
// messages are a few hundred bytes; a longer one is refused before it is
// read, and the connection closed.
const MaxAuthMessage = 4096

// Texts of the 400 replies of the handshake and of the authorisation checks.
// Failed handshakes all get ErrAuthFailed, whatever went wrong, so that a
// client cannot tell an unknown user from a wrong password.
var (
	ErrAuthRequired  = NewBizError("authentication required")
	ErrAuthFailed    = NewBizError("authentication failed")
	ErrAuthDisabled  = NewBizError("authentication is not enabled on this server")
	ErrAuthMechanism = NewBizError("unsupported authentication mechanism (want " + MechSCRAMSHA256 + ")")
	ErrAuthNoStart   = NewBizError("authentication continue without a started handshake")
	ErrAuthDone      = NewBizError("already authenticated")
	ErrAuthTooLong   = NewBizError(fmt.Sprintf("authentication message longer than %d bytes", MaxAuthMessage))
)

// AppendAuthStart appends an auth start request: mechanism in the topic
// field, the client-first-message as the body.
func AppendAuthStart(dst []byte, mechanism string, clientFirst []byte) ([]byte, error) {
	return appendAuth(dst, CmdAuthStart, []byte(mechanism), clientFirst)
}

// AppendAuthContinue appends an auth continue request carrying the
// client-final-message.
func AppendAuthContinue(dst []byte, clientFinal []byte) ([]byte, error) {
	return appendAuth(dst, CmdAuthContinue, nil, clientFinal)
}

func appendAuth(dst []byte, cmd Command, mech, msg []byte) ([]byte, error) {
	if len(msg) > MaxAuthMessage {
		return dst, fmt.Errorf("auth message of %d bytes (max %d): %w", len(msg), MaxAuthMessage, ErrFieldTooLong)
	}
	return AppendRequest(dst, cmd, PayloadArea(uint32(len(msg))), mech, nil, msg)
}

// readAuth reads the body of an auth request into req.Payload (the topic
// field, the mechanism for auth start, goes to req.Topic as usual).
func (rr *RequestReader) readAuth(req *Request, tt int) error {
	p := req.Header.PayloadSize()
	if p > MaxAuthMessage {
		return refuseClose(ErrAuthTooLong)
	}
	buf := make([]byte, tt+int(p))
	if err := rr.readFull(buf, req.Header.Cmd.String()); err != nil {
		return err
	}
	req.setTopicTrace(buf)
	req.Payload = buf[tt:]
	return nil
}
