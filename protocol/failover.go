package protocol

// Failover commands: an extension of docs/protocol.md §1.3 (README, "Protocol
// extension: status, promote and follow"). Each is the 20-byte header with
// header bytes 3..18 zero, then the topic field and the traceId, and no
// body, like delete (3). An original server answers them with 400 "don't
// support action" and closes the connection; clients must read that as "no
// status available".
const (
	// CmdStatus asks for the node's role, promotion epoch, last eventId and,
	// on a slave, the master it follows. No topic.
	CmdStatus Command = 34
	// CmdPromote turns a running slave into a master. No topic.
	CmdPromote Command = 35
	// CmdFollow re-points a running slave to the master whose "host:port"
	// is in the topic field.
	CmdFollow Command = 36
)

// Texts of the failover commands' 400 replies.
var (
	ErrAlreadyMaster   = NewBizError("already a master")
	ErrFollowNeedsAddr = NewBizError("follow needs the master's host:port in the topic field")
)

// AppendStatus appends a status request.
func AppendStatus(dst, traceID []byte) ([]byte, error) {
	return appendReqHeader(dst, CmdStatus, [16]byte{}, nil, traceID)
}

// AppendPromote appends a promote request.
func AppendPromote(dst, traceID []byte) ([]byte, error) {
	return appendReqHeader(dst, CmdPromote, [16]byte{}, nil, traceID)
}

// AppendFollow appends a follow request for the master at addr
// ("host:port").
func AppendFollow(dst []byte, addr string, traceID []byte) ([]byte, error) {
	return appendReqHeader(dst, CmdFollow, [16]byte{}, []byte(addr), traceID)
}
