// Package docrun runs the shell commands of the code blocks of README.md,
// docs/getting-started.md, docs/client.md, docs/cluster.md,
// docs/durability-and-failover.md and docs/bridge.md, so that what a
// newcomer copies works (issue 34: "every command in their code blocks is
// run by a test"; the security walkthrough is examples/security's), and
// checks those of docs/testing.md, the suite's own long runs, against the
// code they name (suite_test.go).
//
// The tests (readme_test.go, bridge_test.go) read each file's ```sh and
// ```yaml blocks in order and run them in a temporary directory of its own
// with built smss and smssctl binaries, with these substitutions and
// nothing else:
//
//   - every port of the docs (12301.., 12311, 12401..) becomes a free
//     loopback port, in commands and in config files alike;
//   - `go run ./cmd/smss ARGS` (or `smss ARGS`) starts the built smss
//     with ARGS in the background and waits until it listens; with no
//     -config it gets one holding only its port (the embedded defaults
//     listen on 12301);
//   - the builds (`go build -o X ./cmd/X` of smss, smssctl and, in
//     docs/bridge.md, smss-bridge) are already done: ./smssctl and
//     ./smss-bridge (and the same on PATH) are the built ones, smss is the
//     one `smss ARGS` starts, and SMSS_ADDR points smssctl at the mapped
//     12301; `go run ./examples/X ARGS` runs X built, with -addr the
//     mapped 12301;
//   - a command whose comment says Ctrl-C ends it runs until it printed
//     something, then gets SIGINT;
//   - a yaml block is written to the file the following command names
//     (-config FILE); b.yaml and c.yaml after an a.yaml block ("the same
//     with b.yaml and c.yaml", or a later -config b.yaml) are made from it
//     with that node's port, data directory and, in a cluster, node id;
//   - a server started on a port an earlier section's server serves
//     replaces it;
//   - bash .ci/run and comment lines are not run; the suite's own
//     commands (go test, go run ./cmd/smss-torture, after any VAR=value)
//     are not run but checked: their packages exist, their -run, -fuzz
//     and -bench patterns match a function of those packages, their
//     VAR= knobs are read by those packages or the test kits, and the
//     flags they give a command are declared by it (a minute of fuzzing
//     per target or a hundred torture cycles would take the whole
//     suite's budget; the suite runs every one of them short).
//
// docs/bridge.md's block runs smss-bridge next to a master it does not
// start: its test starts the built smss on the mapped 12301 first (with
// the embedded defaults, as `go run ./cmd/smss` would), and stands in for
// the block's other hosts and files, each of which the block must still
// name:
//
//   - nats1:4222 is a NATS server with JetStream run by the test;
//   - k1:9092 and k2:9092 are the two brokers of a Kafka cluster (kfake)
//     run by the test;
//   - 127.0.0.1:9108 (--metrics-addr) is a free loopback port;
//   - /etc/smss/bridge.yaml is config/bridge.yaml, the documented
//     defaults, with master set to the mapped 12301 and nats.url to that
//     NATS server;
//   - each smss-bridge command runs in the background until it has done
//     what the block says of it: messages the test publishes to topics it
//     must mirror are on its target (stream SMSS, subject smss.<topic>;
//     Kafka topic smss.<topic>) and one published before them to a topic
//     its --topics or --exclude leaves out is not; with --metrics-addr,
//     the endpoint there counts them. It then gets SIGINT and must exit 0.
//
// A line ending in a backslash is joined with the next, as a shell does.
// Any other command must exit 0.
package docrun
