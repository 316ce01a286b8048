package config

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// DefaultPath is the file Load reads when given no path, relative to the
// working directory (as the original's deployment layout).
const DefaultPath = "config/config.yaml"

// sample is the documented sample shipped in the repository; it supplies the
// values when no file exists and is tested to equal Default().
//
//go:embed config.yaml
var sample []byte

// Sample returns the embedded sample config.yaml (for printing or writing
// out a starting file).
func Sample() []byte { return bytes.Clone(sample) }

// Load reads the configuration. path "" means DefaultPath if it exists,
// otherwise the embedded sample. Keys missing from the file keep their
// defaults. Load does not validate: call Validate.
func Load(path string) (*Config, error) {
	if path == "" {
		switch _, err := os.Stat(DefaultPath); {
		case err == nil:
			path = DefaultPath
		case errors.Is(err, fs.ErrNotExist):
			c, err := parse(sample, SourceEmbedded)
			if err != nil {
				return nil, err
			}
			c.Source = SourceEmbedded
			return c, nil
		default:
			return nil, fmt.Errorf("config: %w", err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := parse(data, path)
	if err != nil {
		return nil, err
	}
	c.Source = path
	return c, nil
}

// Parse decodes YAML over Default(), as Load does with a file's contents.
func Parse(data []byte) (*Config, error) { return parse(data, "") }

func parse(data []byte, source string) (*Config, error) {
	where := "config: "
	if source != "" {
		where += source + ":"
	} else {
		where += "line "
	}
	// First pass: a generic node tree, checked against the struct so that
	// every problem is reported with its dotted key and line, which the
	// decoder's own messages ("field x not found in type config.Rotate")
	// do not give.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return Default(), nil // empty file or only comments
		}
		return nil, fmt.Errorf("config: %s: %w", sourceName(source), err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config: %s: more than one YAML document", sourceName(source))
	}
	if len(doc.Content) == 1 {
		if err := checkSection(doc.Content[0], reflect.TypeFor[Config](), ""); err != nil {
			return nil, fmt.Errorf("%s%w", where, err)
		}
	}

	// Second pass: the real decode, strict as well, over the defaults so
	// that absent keys keep them.
	c := Default()
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config: %s: %w", sourceName(source), err)
	}
	return c, nil
}

func sourceName(source string) string {
	if source == "" {
		return "input"
	}
	return source
}

// nodeError carries a line number so the message reads like a compiler's.
type nodeError struct {
	line int
	msg  string
}

func (e *nodeError) Error() string { return fmt.Sprintf("%d: %s", e.line, e.msg) }

func errAt(n *yaml.Node, format string, args ...any) error {
	return &nodeError{line: n.Line, msg: fmt.Sprintf(format, args...)}
}

// checkSection verifies that n, the value of key prefix, fits struct type t:
// a mapping whose keys are known, each given once, with leaf values that
// decode into the field type.
func checkSection(n *yaml.Node, t reflect.Type, prefix string) error {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // an empty section keeps all its defaults
	}
	if n.Kind != yaml.MappingNode {
		if prefix == "" {
			return errAt(n, "the document must be a mapping of keys")
		}
		return errAt(n, "%s must be a section (a mapping of keys)", prefix)
	}
	fields := yamlFields(t)
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "<<" {
			continue // merge key: the strict decoder checks merged keys
		}
		key := join(prefix, k.Value)
		if line, dup := seen[k.Value]; dup {
			return errAt(k, "key %q set twice (first on line %d)", key, line)
		}
		seen[k.Value] = k.Line
		f, ok := fields[k.Value]
		if !ok {
			return errAt(k, "unknown key %q%s", key, suggest(fields, prefix, k.Value))
		}
		if f.Type.Kind() == reflect.Struct {
			if err := checkSection(v, f.Type, key); err != nil {
				return err
			}
			continue
		}
		if f.Type.Kind() == reflect.Map {
			if err := checkMap(v, f.Type, key); err != nil {
				return err
			}
			continue
		}
		leaf := v
		for leaf.Kind == yaml.AliasNode {
			leaf = leaf.Alias
		}
		if leaf.Kind == yaml.ScalarNode && leaf.Tag == "!!null" {
			return errAt(k, "key %q has no value (delete the line to keep the default)", key)
		}
		if leaf.Kind != yaml.ScalarNode {
			return errAt(v, "key %q must be a single %s value", key, f.Type.Kind())
		}
		if isInt(f.Type.Kind()) && leaf.ShortTag() != "!!int" {
			// yaml.v3 truncates a float into an int field (port: 22051.5
			// listened on 22051, maxLogSize: 1.5e9 became 1500000000):
			// every integer key takes integer literals only.
			return errAt(v, "key %q must be an integer (got %q)", key, leaf.Value)
		}
		if err := leaf.Decode(reflect.New(f.Type).Interface()); err != nil {
			return errAt(v, "key %q: %q is not a valid %s", key, leaf.Value, f.Type.Kind())
		}
	}
	return nil
}

// checkMap verifies a mapping of names to sections (cluster.peers): each
// name given once, each value a section of the map's element type.
func checkMap(n *yaml.Node, t reflect.Type, prefix string) error {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return errAt(n, "%s must be a mapping of names to sections", prefix)
	}
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value == "" || k.Value == "<<" {
			return errAt(k, "%s: every entry needs a plain name", prefix)
		}
		if line, dup := seen[k.Value]; dup {
			return errAt(k, "%s.%s set twice (first on line %d)", prefix, k.Value, line)
		}
		seen[k.Value] = k.Line
		if t.Elem().Kind() == reflect.Struct {
			if err := checkSection(v, t.Elem(), join(prefix, k.Value)); err != nil {
				return err
			}
		}
	}
	return nil
}

func isInt(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// suggest offers the correctly-cased key when only the case is wrong, the
// most common slip with camelCase keys.
func suggest(fields map[string]reflect.StructField, prefix, got string) string {
	for name := range fields {
		if strings.EqualFold(name, got) {
			return fmt.Sprintf(" (did you mean %q?)", join(prefix, name))
		}
	}
	return ""
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// yamlFields maps the yaml key of each exported field of t to the field,
// skipping fields tagged "-".
func yamlFields(t reflect.Type) map[string]reflect.StructField {
	m := make(map[string]reflect.StructField, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if name, ok := yamlName(f); ok {
			m[name] = f
		}
	}
	return m
}

func yamlName(f reflect.StructField) (string, bool) {
	if !f.IsExported() {
		return "", false
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" || name == "" {
		return "", false
	}
	return name, true
}
