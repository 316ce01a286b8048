// Package adminclient reads smss's admin JSON API (package admin serves it,
// package adminapi holds its shapes) and renders it for a terminal: RunStats
// and RunTop, which smssctl exposes as `smssctl stats` and `smssctl top`.
// It is apart from the server so that smssctl links neither the admin
// server nor, through it, the broker's storage (badger).
package adminclient
