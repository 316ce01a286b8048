// Package layering holds only tests: they check the import graph against
// the cuts docs/architecture.md promises (for example that
// the packages a client or the wire layer needs do not link badger, the
// meta store's database), and that only tests import the test kit
// internal/smsstest. They also hold that document's picture of the graph
// to the real one, which drifted unnoticed while nothing checked it: its
// import table must list exactly the direct imports go list reports,
// every arrow of its drawing must be one of them, and every package must
// be drawn or named as not drawn (architecture_test.go).
package layering
