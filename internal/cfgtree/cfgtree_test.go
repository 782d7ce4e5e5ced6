package cfgtree

import (
	"math"
	"slices"
	"testing"
)

func TestGetSetDelete(t *testing.T) {
	m := map[string]any{"a": map[string]any{"b": int64(1)}, "s": "x"}
	if v, ok := Get(m, "a", "b"); !ok || v != int64(1) {
		t.Errorf("Get a.b = %v, %v", v, ok)
	}
	if _, ok := Get(m, "s", "b"); ok {
		t.Error("Get through a string")
	}
	if Table(m, "a") == nil || Table(m, "s") != nil || Table(m, "none") != nil {
		t.Error("Table")
	}
	Set(m, []string{"s", "t"}, true) // replaces the string by a table
	if v, _ := Get(m, "s", "t"); v != true {
		t.Errorf("Set s.t: %v", m)
	}
	Delete(m, "a", "b")
	Delete(m, "x", "y") // nothing there: nothing happens
	if _, ok := Get(m, "a", "b"); ok {
		t.Error("Delete a.b")
	}
	c := Copy(m).(map[string]any)
	Set(c, []string{"a", "z"}, "new")
	if _, ok := Get(m, "a", "z"); ok {
		t.Error("Copy shares a table")
	}
}

func TestEqual(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b any
		path []string
		eq   bool
	}{
		{"same", map[string]any{"a": []any{int64(1), "x"}}, map[string]any{"a": []any{int64(1), "x"}}, nil, true},
		{"NaN", math.NaN(), math.NaN(), nil, true},
		{"element", map[string]any{"a": []any{int64(1), "x"}}, map[string]any{"a": []any{int64(1), "y"}}, []string{"a", "1"}, false},
		{"extra key", map[string]any{"a": int64(1)}, map[string]any{"a": int64(1), "b": int64(2)}, []string{"b"}, false},
		{"type", map[string]any{"a": int64(1)}, map[string]any{"a": 1.0}, []string{"a"}, false},
		{"first in sorted order", map[string]any{"b": int64(1), "a": int64(1)}, map[string]any{"b": int64(2), "a": int64(2)}, []string{"a"}, false},
	} {
		p, eq := Equal(tc.a, tc.b)
		if eq != tc.eq || !slices.Equal(p, tc.path) {
			t.Errorf("%s: %v %v, want %v %v", tc.name, p, eq, tc.path, tc.eq)
		}
	}
}

func TestOnly(t *testing.T) {
	before := map[string]any{"keep": "x", "runtimes": map[string]any{"runc": map[string]any{"path": "runc"}}}
	for _, tc := range []struct {
		name    string
		after   map[string]any
		allowed [][]string
		bad     []string
		added   bool
	}{
		{"allowed addition", map[string]any{"keep": "x", "runtimes": map[string]any{"runc": map[string]any{"path": "runc"}, "gpurun": map[string]any{"path": "/g"}}}, [][]string{{"runtimes", "gpurun"}}, nil, false},
		{"a table made for an allowed key", map[string]any{"keep": "x", "runtimes": map[string]any{"runc": map[string]any{"path": "runc"}}, "t": map[string]any{"u": int64(1)}}, [][]string{{"t", "u"}}, nil, false},
		{"changed outside", map[string]any{"keep": "y", "runtimes": map[string]any{"runc": map[string]any{"path": "runc"}}}, [][]string{{"runtimes"}}, []string{"keep"}, false},
		{"removed outside", map[string]any{"keep": "x"}, [][]string{{"runtimes", "gpurun"}}, []string{"runtimes", "runc", "path"}, false},
		{"added outside", map[string]any{"keep": "x", "extra": int64(1), "runtimes": map[string]any{"runc": map[string]any{"path": "runc"}}}, nil, []string{"extra"}, true},
	} {
		c, found := Only(before, tc.after, tc.allowed)
		if found != (tc.bad != nil) || !slices.Equal(c.Path, tc.bad) || c.Added != tc.added {
			t.Errorf("%s: %+v %v, want %v (added %v)", tc.name, c, found, tc.bad, tc.added)
		}
	}
}
