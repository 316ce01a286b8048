// Package layering holds only tests: they check the import graph against
// the cuts docs/architecture.md promises (for example that
// the packages a client or the wire layer needs do not link badger, the
// meta store's database), and that only tests import the test kit
// internal/smsstest.
package layering
