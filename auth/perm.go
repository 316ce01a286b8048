package auth

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/smssmq/smss/protocol"
)

// Permission is what a command needs (see the command table in doc.go).
type Permission uint8

const (
	// PermNone: no check (alive, the handshake, list — which is filtered).
	PermNone Permission = iota
	// PermPublish: pub (1) and delay pub (16) to the topic.
	PermPublish
	// PermSubscribe: sub (0) on the topic.
	PermSubscribe
	// PermManage: create (2) and delete (3) of the topic.
	PermManage
	// PermDescribe: topic info (65). Not granted on its own: any of
	// publish, subscribe or manage on the topic includes it.
	PermDescribe
	// PermReplication: replica (64) and valid list (99); the replication
	// role.
	PermReplication
	// PermAdmin: promote (35) and follow (36), which change the node's
	// role; the admin role only.
	PermAdmin
)

func (p Permission) String() string {
	switch p {
	case PermNone:
		return "none"
	case PermPublish:
		return "publish"
	case PermSubscribe:
		return "subscribe"
	case PermManage:
		return "manage"
	case PermDescribe:
		return "describe"
	case PermReplication:
		return "replication"
	case PermAdmin:
		return "admin"
	}
	return fmt.Sprintf("permission(%d)", uint8(p))
}

// CommandPermission maps a request command to the permission it needs and
// whether that permission is per topic. Commands not listed (alive, the
// handshake, list, status, unknown codes) need none: any logged-in user may
// run them.
func CommandPermission(cmd protocol.Command) (perm Permission, perTopic bool) {
	switch cmd {
	case protocol.CmdPub, protocol.CmdDelay:
		return PermPublish, true
	case protocol.CmdSub, protocol.CmdQueueConsume:
		return PermSubscribe, true
	case protocol.CmdCreate, protocol.CmdDelete, protocol.CmdQueueCreate, protocol.CmdQueueDelete:
		return PermManage, true
	case protocol.CmdTopicInfo, protocol.CmdQueueInfo:
		return PermDescribe, true
	case protocol.CmdReplica, protocol.CmdValidList:
		return PermReplication, false
	case protocol.CmdPromote, protocol.CmdFollow, protocol.CmdSwitchover, protocol.CmdCursorList, protocol.CmdCursorSet, protocol.CmdCursorReset:
		return PermAdmin, false
	}
	return PermNone, false
}

// ValidatePattern accepts "*", "prefix.*" where prefix is a valid topic
// name, or an exact valid topic name (docs/protocol.md §11 rule). A "*" anywhere else is
// refused so that "orders*" cannot be mistaken for a prefix grant.
func ValidatePattern(p string) error {
	if p == "*" {
		return nil
	}
	name := p
	if prefix, ok := strings.CutSuffix(p, ".*"); ok {
		name = prefix
	}
	if strings.Contains(name, "*") {
		return fmt.Errorf("pattern %q: '*' is allowed only alone or as a final \".*\"", p)
	}
	if err := protocol.ValidateTopicName([]byte(name)); err != nil {
		return fmt.Errorf("pattern %q: %v", p, err)
	}
	return nil
}

// patterns is a compiled list of topic patterns.
type patterns struct {
	all      bool
	exact    map[string]struct{}
	prefixes []string // each ends with "."
}

func compilePatterns(list []string) patterns {
	var ps patterns
	for _, p := range list {
		switch prefix, ok := strings.CutSuffix(p, "*"); {
		case p == "*":
			ps.all = true
		case ok:
			ps.prefixes = append(ps.prefixes, prefix) // keeps the "."
		default:
			if ps.exact == nil {
				ps.exact = make(map[string]struct{})
			}
			ps.exact[p] = struct{}{}
		}
	}
	return ps
}

func (ps *patterns) match(topic string) bool {
	if ps.all {
		return true
	}
	if _, ok := ps.exact[topic]; ok {
		return true
	}
	for _, pre := range ps.prefixes {
		if len(topic) > len(pre) && strings.HasPrefix(topic, pre) {
			return true
		}
	}
	return false
}

// Principal is a user as the server checks it: immutable, shared by every
// connection of that user until the next reload replaces it.
type Principal struct {
	Name        string
	Disabled    bool
	Admin       bool
	Replication bool
	publish     patterns
	subscribe   patterns
	manage      patterns
	creds       Credentials
	identity    string
}

// Identity names the account behind the principal: a hash of its stored
// credentials, which change with every password change (a fresh salt) and
// when a user is removed and added again. A connection logged in as one
// identity must not act as another account of the same name.
func (p *Principal) Identity() string { return p.identity }

func credentialsIdentity(c *Credentials) string {
	h := sha256.New()
	var it [8]byte
	binary.BigEndian.PutUint64(it[:], uint64(c.Iterations))
	h.Write(it[:])
	for _, b := range [][]byte{c.Salt, c.StoredKey, c.ServerKey} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func newPrincipal(u *User) *Principal {
	return &Principal{
		Name:        u.Name,
		Disabled:    u.Disabled,
		Admin:       u.HasRole(RoleAdmin),
		Replication: u.HasRole(RoleReplication),
		publish:     compilePatterns(u.Publish),
		subscribe:   compilePatterns(u.Subscribe),
		manage:      compilePatterns(u.Manage),
		creds:       u.SCRAM,
		identity:    credentialsIdentity(&u.SCRAM),
	}
}

// Allowed reports whether the principal may do perm (on topic, for the
// per-topic permissions). A disabled principal may do nothing.
func (p *Principal) Allowed(perm Permission, topic string) bool {
	if p == nil || p.Disabled {
		return false
	}
	if p.Admin || perm == PermNone {
		return true
	}
	switch perm {
	case PermPublish:
		return p.publish.match(topic)
	case PermSubscribe:
		return p.subscribe.match(topic)
	case PermManage:
		return p.manage.match(topic)
	case PermDescribe:
		return p.publish.match(topic) || p.subscribe.match(topic) || p.manage.match(topic)
	case PermReplication:
		return p.Replication
	}
	return false
}

// Denied is the 400 text of a refused command: it names the user, the
// missing permission and the topic (quoted with Go escaping, so a hostile
// name cannot forge log lines or replies).
func Denied(user string, perm Permission, topic string) *protocol.BizError {
	var what string
	switch perm {
	case PermPublish:
		what = fmt.Sprintf("publish to %q", topic)
	case PermSubscribe:
		what = fmt.Sprintf("subscribe to %q", topic)
	case PermManage:
		what = fmt.Sprintf("manage topic %q", topic)
	case PermDescribe:
		what = fmt.Sprintf("see topic %q (needs publish, subscribe or manage on it)", topic)
	case PermReplication:
		what = "replicate (needs the replication role)"
	case PermAdmin:
		what = "promote or re-point this node (needs the admin role)"
	default:
		what = perm.String()
	}
	return protocol.NewBizError(fmt.Sprintf("permission denied: user %q may not %s", user, what))
}
