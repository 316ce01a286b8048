// Package replication holds end-to-end tests of master-slave replication
// without a cluster: full copy, faults, promote and follow, rejoin of an old
// master and divergence, semi-sync (restart, copied directories, fail and
// degrade modes, TLS), failover with and without semi-sync, epochs across a
// changed history, read-committed delivery, legacy topic names and the
// migration steps.
package replication
