#!/usr/bin/env bash
# The security worked example of docs/security.md, step by step, runnable as is on a
# fresh machine (no root, nothing outside $SMSS_DEMO_DIR): users, a
# throwaway CA, a master with auth and TLS, smssctl over TLS, a reload with
# SIGHUP, and a slave that replicates over TLS and has auth of its own.
# examples/security/walkthrough_test.go runs it in the test suite; every
# command docs/security.md shows under "Worked example" is a line of this file.
#
# Needs smss and smssctl in $PATH (go build -o ... ./cmd/smss ./cmd/smssctl),
# openssl and bash. Ports: $SMSS_PORT (12301), $SMSS_TLS_PORT (12302),
# $SMSS_SLAVE_PORT (12311). Both servers are stopped at the end.
set -euo pipefail

DIR=${SMSS_DEMO_DIR:-$PWD/smss-demo}
PORT=${SMSS_PORT:-12301}
TLS_PORT=${SMSS_TLS_PORT:-12302}
SLAVE_PORT=${SMSS_SLAVE_PORT:-12311}

step() { printf '\n== %s\n' "$*"; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
# wait_listen LOG: wait until the server logging to LOG listens (30 s).
wait_listen() {
  for _ in $(seq 300); do
    grep -q 'smss listening' "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "server did not start:"; cat "$1"; return 1
}

step "a private directory for the users file, keys and data"
mkdir -p "$DIR" && chmod 700 "$DIR" && cd "$DIR"
export SMSS_USERS_FILE=$DIR/users.json
umask 077

step "users (passwords from stdin here; on a terminal they are asked twice)"
printf 'ops-secret\n'     > ops.pw
printf 'billing-secret\n' > billing.pw
printf 'replica-secret\n' > replica1.pw
smssctl user add ops --roles admin --password-stdin < ops.pw
smssctl user add billing --publish 'order,invoice.*' --subscribe order --password-stdin < billing.pw
smssctl user add replica1 --roles replication --password-stdin < replica1.pw
smssctl user add intern --subscribe order --password-stdin < billing.pw
smssctl user list

step "a throwaway CA and a server certificate for mq.example.com and 127.0.0.1"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
  -subj /CN=smss-ca -keyout ca-key.pem -out ca.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=mq.example.com \
  -keyout server-key.pem -out server.csr 2>/dev/null
printf 'subjectAltName=DNS:mq.example.com,IP:127.0.0.1\n' > san.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 365 \
  -extfile san.ext -out server.pem 2>/dev/null

step "the master: plain listener on loopback, TLS for remote clients"
cat > smss.yaml <<YAML
host: 127.0.0.1
port: $PORT
store:
  path: $DIR/data
auth:
  enabled: true
  usersFile: $DIR/users.json
tls:
  listen: 0.0.0.0:$TLS_PORT
  cert: $DIR/server.pem
  key: $DIR/server-key.pem
YAML
smss -config smss.yaml > smss.log 2>&1 &
SMSS_PID=$!
pids+=("$SMSS_PID")
wait_listen smss.log

step "smssctl: plain and local as ops, over TLS as billing"
export SMSS_ADDR=127.0.0.1:$PORT
smssctl --user ops --password-file ops.pw topic create order
smssctl --addr 127.0.0.1:$TLS_PORT --ca ca.pem --server-name mq.example.com \
        --user billing --password-file billing.pw pub order 'hello'
smssctl --addr 127.0.0.1:$TLS_PORT --ca ca.pem --server-name mq.example.com \
        --user billing --password-file billing.pw sub order --who audit --count 1

step "change grants and users, then apply them with SIGHUP to this server only"
smssctl user set billing --subscribe 'order,refund'
smssctl user disable intern
kill -HUP "$SMSS_PID"
for _ in $(seq 100); do grep -q 'users file reloaded' smss.log && break; sleep 0.1; done
grep -q 'users file reloaded' smss.log
if smssctl --user intern --password-file billing.pw topic info order 2>err.txt; then
  echo "a disabled user was let in"; exit 1
fi
cat err.txt
smssctl user delete intern

step "a slave: logs in as replica1 over TLS, has auth of its own"
cp users.json slave-users.json
cat > slave.yaml <<YAML
host: 127.0.0.1
port: $SLAVE_PORT
store:
  path: $DIR/slave-data
auth:
  enabled: true
  usersFile: $DIR/slave-users.json
replication:
  user: replica1
  passwordFile: $DIR/replica1.pw
  useTLS: true
  ca: $DIR/ca.pem
  serverName: mq.example.com
YAML
smss -role slave -host 127.0.0.1 -port "$TLS_PORT" -event 0 -config slave.yaml > slave.log 2>&1 &
pids+=("$!")
wait_listen slave.log
smssctl --addr 127.0.0.1:$SLAVE_PORT --user billing --password-file billing.pw \
        sub order --who audit --count 1 --timeout 30s
if smssctl --addr 127.0.0.1:$SLAVE_PORT topic list 2>err.txt; then
  echo "the slave answered without a login"; exit 1
fi
cat err.txt

step "done"
