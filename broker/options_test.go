package broker

import (
	"reflect"
	"testing"
)

// TestOpenFillsZeroOptionsFromDefaults: Open fills every zero field in
// from DefaultOptions, but the ones whose zero is a setting of its own,
// which it keeps (DefaultOptions' comment lists them).
func TestOpenFillsZeroOptionsFromDefaults(t *testing.T) {
	b := openTest(t, t.TempDir(), func(o *Options) { o.FlushLevel = 0 })
	defer b.Close()
	kept := map[string]bool{"Dir": true, "FlushLevel": true, "NoCache": true, "Slave": true, "GroupWait": true,
		"MinFreeBytes": true, "MinLifetime": true, "LogSample": true, "IdleLogSample": true, "CursorsOff": true,
		"CursorRetention": true, "OpenFile": true, "Statfs": true, "Metrics": true}
	got, want := reflect.ValueOf(b.opts), reflect.ValueOf(DefaultOptions())
	for i := range got.NumField() {
		f := got.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		g, w := got.Field(i), want.Field(i)
		switch {
		case kept[f.Name]:
			if f.Name != "Dir" && !g.IsZero() {
				t.Errorf("Open set %s to %v; its zero is a setting of its own", f.Name, g)
			}
		case f.Type.Kind() == reflect.Func || f.Type.Kind() == reflect.Pointer:
			if g.IsNil() {
				t.Errorf("Open left %s nil", f.Name)
			}
		case !g.Equal(w):
			t.Errorf("Open set %s to %v, DefaultOptions has %v", f.Name, g, w)
		}
	}
}
