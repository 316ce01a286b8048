// Package docrun runs the shell commands of the code blocks of README.md,
// docs/getting-started.md, docs/client.md, docs/cluster.md and
// docs/durability-and-failover.md, so that what a newcomer copies works
// (issue 34: "every command in their code blocks is run by a test"; the
// security walkthrough is examples/security's, the fuzz and torture
// commands of docs/testing.md are the suite's own).
//
// The tests (readme_test.go) read each file's ```sh and ```yaml blocks in
// order and run them in a temporary directory of its own with built smss
// and smssctl binaries, with these substitutions and nothing else:
//
//   - every port of the docs (12301.., 12311, 12401..) becomes a free
//     loopback port, in commands and in config files alike;
//   - `go run ./cmd/smss ARGS` (or `smss ARGS`) starts the built smss
//     with ARGS in the background and waits until it listens; with no
//     -config it gets one holding only its port (the embedded defaults
//     listen on 12301);
//   - the builds (`go build -o smssctl ./cmd/smssctl`, smss) are already
//     done: ./smssctl (and smssctl on PATH) is the built one, and
//     SMSS_ADDR points it at the mapped 12301; `go run ./examples/X ARGS`
//     runs X built, with -addr the mapped 12301;
//   - a command whose comment says Ctrl-C ends it runs until it printed
//     something, then gets SIGINT;
//   - a yaml block is written to the file the following command names
//     (-config FILE); b.yaml and c.yaml after an a.yaml block ("the same
//     with b.yaml and c.yaml", or a later -config b.yaml) are made from it
//     with that node's port, data directory and, in a cluster, node id;
//   - a server started on a port an earlier section's server serves
//     replaces it;
//   - the suite's own commands (bash .ci/run, go test) are not run.
//
// A line ending in a backslash is joined with the next, as a shell does.
// Any other command must exit 0.
package docrun
