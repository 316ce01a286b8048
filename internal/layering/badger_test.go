package layering

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const badger = "github.com/dgraph-io/badger"

// TestLightPackagesDoNotLinkBadger: smssctl, the wire layer and the packages
// that only describe topics must not link the meta store's database. They
// used to, through meta.Topic (issue 20); the topic type is now
// protocol.TopicInfo and the admin client lives apart from the admin server.
func TestLightPackagesDoNotLinkBadger(t *testing.T) {
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not available:", err)
	}
	for _, pkg := range []string{
		"cmd/smssctl",
		"server",
		"metrics",
		"admin",
		"admin/adminclient",
		"protocol",
		"client",
	} {
		t.Run(pkg, func(t *testing.T) {
			path := "github.com/smssmq/smss/" + pkg
			cmd := exec.Command(gotool, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, path)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v\n%s", path, err, stderr.String())
			}
			imports := map[string][]string{}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) > 0 {
					imports[f[0]] = f[1:]
				}
			}
			if len(imports) == 0 {
				t.Fatalf("go list -deps %s listed nothing", path)
			}
			if chain := importChain(imports, path); chain != nil {
				t.Errorf("%s links badger: %s", path, strings.Join(chain, " → "))
			}
		})
	}
}

// importChain returns the shortest import path from root to a badger
// package, or nil if there is none.
func importChain(imports map[string][]string, root string) []string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if strings.HasPrefix(p, badger) {
			var chain []string
			for ; p != ""; p = prev[p] {
				chain = append([]string{p}, chain...)
			}
			return chain
		}
		for _, q := range imports[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}
