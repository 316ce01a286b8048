package config

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The defaults are written twice: in Default() (and setSecurityDefaults,
// defaultAuth) and in the shipped config/config.yaml, as each key's value
// and its "# Default:" comment. This test holds the three to one value per
// key, so that changing either side alone fails. It reads the file on disk
// (the one operators copy), not only the embedded sample, and decodes each
// key on its own rather than over Default(), so that a key missing from the
// file cannot pass by inheriting the code's value.
func TestShippedYAMLMatchesCodeDefaults(t *testing.T) {
	data, err := os.ReadFile("config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	if len(doc.Content) != 1 {
		t.Fatal("config.yaml: want one YAML document")
	}
	diffs := compareDefaults(doc.Content[0], reflect.ValueOf(Default()).Elem(), "")
	for _, d := range diffs {
		t.Error(d)
	}
}

// TestCompareDefaultsCatchesEitherSide shows that compareDefaults, the
// check above, fails when only the yaml value, only its comment, or only
// the code changes, and when a key is missing from the file.
func TestCompareDefaultsCatchesEitherSide(t *testing.T) {
	data, err := os.ReadFile("config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const line = "  # Default: 500\n  groupWaitUs: 500\n"
	if !strings.Contains(string(data), line) {
		t.Fatal("config.yaml no longer holds the groupWaitUs lines this test edits")
	}
	tests := []struct {
		name string
		yaml string        // replacement of line
		code func(*Config) // change of Default()
		want string        // in the first difference
	}{
		{"unchanged", line, func(*Config) {}, ""},
		{"yaml value", "  # Default: 500\n  groupWaitUs: 400\n", func(*Config) {}, "worker.groupWaitUs: config.yaml sets 400, Default() 500"},
		{"yaml comment", "  # Default: 400\n  groupWaitUs: 500\n", func(*Config) {}, `worker.groupWaitUs: config.yaml's comment says "Default: 400", Default() 500`},
		{"yaml key missing", "  # Default: 500\n", func(*Config) {}, "worker.groupWaitUs: missing from config.yaml"},
		{"code", line, func(c *Config) { c.Worker.GroupWaitUs = 0 }, "worker.groupWaitUs: config.yaml sets 500, Default() 0"},
		{"code string", line, func(c *Config) { c.Replication.OnSyncTimeout = SyncDegrade }, "replication.onSyncTimeout: config.yaml sets fail, Default() degrade"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var doc yaml.Node
			if err := yaml.Unmarshal([]byte(strings.Replace(string(data), line, tt.yaml, 1)), &doc); err != nil {
				t.Fatal(err)
			}
			c := Default()
			tt.code(c)
			diffs := compareDefaults(doc.Content[0], reflect.ValueOf(c).Elem(), "")
			switch {
			case tt.want == "" && len(diffs) != 0:
				t.Fatalf("unexpected differences: %q", diffs)
			case tt.want != "" && (len(diffs) == 0 || diffs[0] != tt.want):
				t.Fatalf("differences %q, want first %q", diffs, tt.want)
			}
		})
	}
}

// defaultComment is the value of a "# Default: v" comment line, without a
// trailing "(1 GiB)"-style gloss.
var defaultComment = regexp.MustCompile(`(?m)^#\s*Default:\s*(.*?)\s*(\(.*\))?\s*$`)

// compareDefaults walks the fields of v (a Config or one of its sections)
// and returns one message per key whose value in the mapping node n, or
// whose "# Default:" comment there, differs from v's.
func compareDefaults(n *yaml.Node, v reflect.Value, prefix string) []string {
	keys := map[string][2]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		keys[n.Content[i].Value] = [2]*yaml.Node{n.Content[i], n.Content[i+1]}
	}
	var diffs []string
	t := v.Type()
	for i := range t.NumField() {
		name, ok := yamlName(t.Field(i))
		if !ok {
			continue
		}
		key, f := join(prefix, name), v.Field(i)
		kv, ok := keys[name]
		if !ok {
			diffs = append(diffs, key+": missing from config.yaml")
			continue
		}
		if f.Kind() == reflect.Struct {
			diffs = append(diffs, compareDefaults(kv[1], f, key)...)
			continue
		}
		got := reflect.New(f.Type())
		if err := kv[1].Decode(got.Interface()); err != nil {
			diffs = append(diffs, fmt.Sprintf("%s: config.yaml value %q: %v", key, kv[1].Value, err))
			continue
		}
		want := fmt.Sprint(f.Interface())
		if !reflect.DeepEqual(got.Elem().Interface(), f.Interface()) {
			diffs = append(diffs, fmt.Sprintf("%s: config.yaml sets %v, Default() %s", key, got.Elem().Interface(), want))
			continue
		}
		m := defaultComment.FindStringSubmatch(kv[0].HeadComment)
		if m == nil {
			diffs = append(diffs, key+": config.yaml has no \"# Default:\" comment above it")
			continue
		}
		if said := strings.Trim(m[1], `"`); said != want {
			diffs = append(diffs, fmt.Sprintf("%s: config.yaml's comment says %q, Default() %s", key, "Default: "+m[1], want))
		}
	}
	return diffs
}
