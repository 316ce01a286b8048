// Package auth is smss's security layer: the users file, SCRAM-SHA-256
// authentication (RFC 5802, RFC 7677; both sides), per-user permissions,
// rate limiting of failed handshakes, and TLS configuration helpers.
//
// Users file (JSON, written by smssctl user ...):
//
//	{
//	  "version": 1,
//	  "users": [
//	    {
//	      "name": "billing",
//	      "disabled": false,
//	      "roles": ["admin", "replication"],
//	      "publish": ["orders", "invoice.*"],
//	      "subscribe": ["*"],
//	      "manage": [],
//	      "scram": {"iterations": 100000, "salt": "<base64>",
//	                "storedKey": "<base64>", "serverKey": "<base64>"}
//	    }
//	  ]
//	}
//
// Invariants:
//
//   - No password and no salted password is ever stored, logged or sent.
//     The file holds the RFC 5802 StoredKey and ServerKey, which verify a
//     proof but cannot produce one; they still allow an offline guessing
//     attack, so the file is written with mode 0600 (WriteFile: temporary
//     file, fsync, rename, directory fsync) and the server refuses it when
//     others may read it or anyone but its owner may write it (a warning
//     when its group may read it).
//   - Parsing is strict: unknown fields, unknown roles, invalid names and
//     patterns are errors; a file that fails to parse never replaces the
//     users in force (Store.Reload keeps the previous snapshot).
//   - A Store's snapshot is immutable and swapped atomically; every check
//     reads the snapshot current at that moment, so a reload applies to the
//     next command of every connection without dropping it.
//   - Permissions: publish (pub, delay), subscribe (sub), manage (create,
//     delete) are granted per topic pattern: an exact name, "prefix.*"
//     (names starting with "prefix." and longer than it) or "*". Topic info
//     needs any of the three on the topic. The admin role may do
//     everything; the replication role allows replica (64) and valid list
//     (99). List (100) is open to every user but shows only the topics the
//     user holds some grant on. Status (34) is open to every user;
//     promote (35) and follow (36) need the admin role. Alive
//     and the handshake need nothing. A disabled user may do nothing.
//   - The handshake never reveals whether a user exists: unknown users get
//     a salt derived from a secret (NewAuthenticatorWithSecret, kept in a
//     file by LoadOrCreateSecret, so it survives restarts) and the
//     iteration count most real users have, and every
//     failure is the same "authentication failed" (only a client that
//     proved the password of a disabled user is told it is disabled).
//   - A replayed handshake fails: the server nonce of every conversation is
//     fresh (24 random bytes), so a recorded client proof never verifies.
//   - Failed handshakes are limited per remote address (an IPv4 address or
//     an IPv6 /64) and per address and user (Limiter): a few may come back
//     to back, then each further failure locks the key out for an
//     exponentially growing time. The check and the count happen where the
//     proof is verified (Limiter.Begin), a verification under way counts
//     as a failure until it succeeds, handshake starts are rate-limited
//     (Limiter.Start), and evicting a key never lifts an active lockout.
//   - A Principal's Identity is a hash of its credentials: a password
//     change or a re-created user is another account, whose name alone
//     must not carry a session over.
//   - TLS material that can be reloaded (ServerTLS, ClientTLS) is swapped
//     as a whole: a handshake uses the certificate, key and CA bundle of
//     one successful load, never a mix. A reload that fails (unreadable
//     file, no PEM, key not matching the certificate, certificate expired
//     or not yet valid) changes nothing, and its *TLSFileError names the
//     file. Established connections keep what they negotiated.
package auth
