// Package cfgtree works on decoded configuration documents: the nested
// map[string]any (with []any arrays) that TOML and JSON decoders produce.
// It gets and sets values by path, deep-copies, compares, and checks the
// intent of an edit: that the document after it differs from the one
// before only under the paths the edit meant to change (Only). Editors
// that rewrite a file's bytes use Only on the re-parsed result, so that a
// slip in their text surgery is refused instead of written.
package cfgtree

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Get returns the value at path in m.
func Get(m map[string]any, path ...string) (any, bool) {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// Table returns the table at path in m, or nil when there is none (or the
// value there is not a table).
func Table(m map[string]any, path ...string) map[string]any {
	v, _ := Get(m, path...)
	t, _ := v.(map[string]any)
	return t
}

// Set sets the value at path (at least one part) in m, making or replacing
// tables on the way.
func Set(m map[string]any, path []string, v any) {
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}

// Delete removes the value at path (at least one part), if there is one.
func Delete(m map[string]any, path ...string) {
	if t := Table(m, path[:len(path)-1]...); t != nil {
		delete(t, path[len(path)-1])
	}
}

// Copy deep-copies a decoded value: its tables and arrays are new, its
// scalars shared.
func Copy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, c := range v {
			m[k] = Copy(c)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, c := range v {
			s[i] = Copy(c)
		}
		return s
	}
	return v
}

// Join returns path with more appended, in new memory.
func Join(path []string, more ...string) []string {
	return append(slices.Clone(path), more...)
}

// Equal compares two decoded values (a NaN equals a NaN) and returns, when
// they differ, the first path where they do (keys in sorted order; an
// array's elements by index).
func Equal(a, b any) ([]string, bool) {
	return equal(a, b, nil)
}

func equal(a, b any, path []string) ([]string, bool) {
	switch a := a.(type) {
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok {
			return path, false
		}
		for _, k := range slices.Sorted(maps.Keys(a)) {
			if p, ok := equal(a[k], bm[k], Join(path, k)); !ok {
				return p, false
			}
		}
		for _, k := range slices.Sorted(maps.Keys(bm)) {
			if _, ok := a[k]; !ok {
				return Join(path, k), false
			}
		}
		return nil, true
	case []any:
		bs, ok := b.([]any)
		if !ok || len(a) != len(bs) {
			return path, false
		}
		for i := range a {
			if p, ok := equal(a[i], bs[i], Join(path, fmt.Sprint(i))); !ok {
				return p, false
			}
		}
		return nil, true
	case float64:
		bf, ok := b.(float64)
		if ok && (a == bf || math.IsNaN(a) && math.IsNaN(bf)) {
			return nil, true
		}
		return path, false
	case nil:
		return path, b == nil
	}
	if a != b {
		return path, false
	}
	return nil, true
}

// Change is a difference between two documents at a leaf: a value, or a
// table that is empty in one of them.
type Change struct {
	// Path is where.
	Path []string
	// Added says the path is new; Removed that it is gone; neither, that
	// its value changed.
	Added, Removed bool
}

// Changes lists the leaves that differ between before and after, sorted
// by path.
func Changes(before, after map[string]any) []Change {
	b, a := map[string]any{}, map[string]any{}
	flatten(before, nil, b)
	flatten(after, nil, a)
	var out []Change
	for _, k := range slices.Sorted(maps.Keys(b)) {
		w, found := a[k]
		if !found {
			out = append(out, Change{Path: split(k), Removed: true})
		} else if _, same := Equal(b[k], w); !same {
			out = append(out, Change{Path: split(k)})
		}
	}
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if _, found := b[k]; !found {
			out = append(out, Change{Path: split(k), Added: true})
		}
	}
	slices.SortStableFunc(out, func(x, y Change) int { return slices.Compare(x.Path, y.Path) })
	return out
}

// Only returns the first change between before and after that is not
// under one of the allowed paths, and false when there is none. A path is
// allowed when it lies under an allowed path, or on the way to one (a
// table that appears or becomes empty because of an allowed change).
func Only(before, after map[string]any, allowed [][]string) (Change, bool) {
	for _, c := range Changes(before, after) {
		if !isAllowed(c.Path, allowed) {
			return c, true
		}
	}
	return Change{}, false
}

func isAllowed(path []string, allowed [][]string) bool {
	for _, a := range allowed {
		if len(path) >= len(a) && slices.Equal(path[:len(a)], a) {
			return true
		}
		if len(path) < len(a) && slices.Equal(path, a[:len(path)]) {
			return true
		}
	}
	return false
}

// flatten maps every leaf (and empty table) to its path joined by NUL.
func flatten(v any, path []string, out map[string]any) {
	if m, ok := v.(map[string]any); ok && (len(m) > 0 || path == nil) {
		for k, c := range m {
			flatten(c, Join(path, k), out)
		}
		return
	}
	out[strings.Join(path, "\x00")] = v
}

func split(key string) []string {
	return strings.Split(key, "\x00")
}
