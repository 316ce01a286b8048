// Package bridge holds end-to-end tests of smss-bridge, the replica reader
// that mirrors a master into another smss, a Kafka target (kfake, built from
// testdata) or a stream: delivery through kills and failover, read-committed
// mirroring, authentication, and what the bridge costs its master.
package bridge
