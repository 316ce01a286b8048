// Package cluster holds end-to-end tests of smss clusters (nodes with the
// cluster section, electing a master): automatic failover and the chaos
// cycles, the in-sync rule, replacing a node, switchover and manual
// promotion from smssctl, clients and subscribers following the master,
// and cluster links over TLS.
package cluster
