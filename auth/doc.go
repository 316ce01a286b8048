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
//     file, fsync, rename, directory fsync) and the server warns when it is
//     readable by others.
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
//     a salt and iteration count derived from a per-process key, and every
//     failure is the same "authentication failed" (only a client that
//     proved the password of a disabled user is told it is disabled).
//   - A replayed handshake fails: the server nonce of every conversation is
//     fresh (24 random bytes), so a recorded client proof never verifies.
//   - Failed handshakes are limited per remote IP (Limiter): a few may
//     come back to back, then each further failure locks the address out
//     for an exponentially growing time.
//   - TLS material that can be reloaded (ServerTLS, ClientTLS) is swapped
//     as a whole: a handshake uses the certificate, key and CA bundle of
//     one successful load, never a mix. A reload that fails (unreadable
//     file, no PEM, key not matching the certificate, certificate expired
//     or not yet valid) changes nothing, and its *TLSFileError names the
//     file. Established connections keep what they negotiated.
package auth
