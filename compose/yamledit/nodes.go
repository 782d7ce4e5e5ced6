package yamledit

import "go.yaml.in/yaml/v4"

// Resolve follows aliases to the node they name.
func Resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// IsMergeKey reports whether k is the merge key "<<".
func IsMergeKey(k *yaml.Node) bool {
	return k != nil && k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge"
}

// Get returns the key and value nodes of key among m's own entries (not
// those merged in), or nils. Aliases in m are not followed.
func Get(m *yaml.Node, key string) (k, v *yaml.Node) {
	m = Resolve(m)
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if c := m.Content[i]; c.Kind == yaml.ScalarNode && c.Value == key && !IsMergeKey(c) {
			return c, m.Content[i+1]
		}
	}
	return nil, nil
}

// Merged returns the mappings merged into m with "<<", in the order YAML
// gives them precedence (a list's first entry wins).
func Merged(m *yaml.Node) []*yaml.Node {
	m = Resolve(m)
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	var out []*yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		if !IsMergeKey(m.Content[i]) {
			continue
		}
		v := Resolve(m.Content[i+1])
		switch {
		case v == nil:
		case v.Kind == yaml.MappingNode:
			out = append(out, v)
		case v.Kind == yaml.SequenceNode:
			for _, item := range v.Content {
				if r := Resolve(item); r != nil && r.Kind == yaml.MappingNode {
					out = append(out, r)
				}
			}
		}
	}
	return out
}

// Lookup finds key in m as YAML's merge rules see it: m's own entries
// first, then the merged mappings in precedence order, depth first. It
// returns the key and value nodes and the mapping that holds them.
func Lookup(m *yaml.Node, key string) (k, v, owner *yaml.Node) {
	return lookup(Resolve(m), key, 0)
}

func lookup(m *yaml.Node, key string, depth int) (k, v, owner *yaml.Node) {
	if m == nil || m.Kind != yaml.MappingNode || depth > 32 {
		return nil, nil, nil
	}
	if k, v := Get(m, key); k != nil {
		return k, v, m
	}
	for _, src := range Merged(m) {
		if k, v, o := lookup(src, key, depth+1); k != nil {
			return k, v, o
		}
	}
	return nil, nil, nil
}

// Inherits reports whether m takes key from mapping n: whether a lookup of
// key in m, done before n has it, would reach n (m itself included) ahead
// of any mapping that already has key.
func Inherits(m, n *yaml.Node, key string) bool {
	return inherits(Resolve(m), n, key, 0)
}

func inherits(m, n *yaml.Node, key string, depth int) bool {
	if m == nil || m.Kind != yaml.MappingNode || depth > 32 {
		return false
	}
	if m == n {
		return true
	}
	if k, _ := Get(m, key); k != nil {
		return false
	}
	for _, src := range Merged(m) {
		if inherits(src, n, key, depth+1) {
			return true
		}
		if k, _, _ := lookup(src, key, depth+1); k != nil {
			return false
		}
	}
	return false
}

// Sources returns m and the mappings merged into it, directly or through
// other merges, in the order a lookup visits them (YAML's precedence:
// m's own entries, then each merged mapping depth first).
func Sources(m *yaml.Node) []*yaml.Node {
	var out []*yaml.Node
	var walk func(*yaml.Node, int)
	walk = func(n *yaml.Node, depth int) {
		if n == nil || n.Kind != yaml.MappingNode || depth > 32 {
			return
		}
		out = append(out, n)
		for _, src := range Merged(n) {
			walk(src, depth+1)
		}
	}
	walk(Resolve(m), 0)
	return out
}
