package layering

import (
	"strings"
	"testing"
)

const testkit = module + "internal/smsstest"

// testKitUsers are the non-test packages allowed to import the test kit:
// test-support packages themselves, which only tests import.
var testKitUsers = map[string]bool{
	module + "client/internal/testserver": true,
	module + "e2e/internal/kit":           true,
}

// TestOnlyTestsImportTestKit: internal/smsstest builds binaries, starts
// processes and opens ports; no program may link it, only test code (and
// the test-support packages named above). It imports nothing of the module
// so any package's tests can use it without a cycle.
func TestOnlyTestsImportTestKit(t *testing.T) {
	for _, line := range goList(t, "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"...") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if imp == testkit && !testKitUsers[f[0]] {
				t.Errorf("%s imports %s outside its tests", f[0], testkit)
			}
		}
	}
	for _, d := range goList(t, "-deps", testkit) {
		if strings.HasPrefix(d, module) && d != testkit {
			t.Errorf("%s depends on %s", testkit, d)
		}
	}
	// A test-support package's own importers must be tests too.
	for _, line := range goList(t, "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"...") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if testKitUsers[imp] {
				t.Errorf("%s imports test-support package %s outside its tests", f[0], imp)
			}
		}
	}
}
