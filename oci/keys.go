package oci

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// mapFields are the spec's fields whose JSON objects are maps, not
// structs: encoding/json matches their keys exactly, not case-folded.
var mapFields = []string{"annotations", "sysctl"}

// checkKeys refuses a JSON document in which one object holds the same key
// twice, or — outside the spec's maps — two keys that encoding/json (and
// so runc) folds into one field ("mounts" and "Mounts", or "mountſ" with
// the long s). Each reader would take the last, but which of them the
// engine meant is anybody's guess: no engine writes such a document, and
// gpurun does not size a container (or grow a pod's tmpfs) on a guess.
func checkKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	type object struct {
		keys   [][]byte
		isMap  bool
		expect bool // the next string token is a key
	}
	var stack []*object
	parentKey := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var top *object
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				isMap := false
				for _, f := range mapFields {
					if parentKey != "" && bytes.EqualFold([]byte(parentKey), []byte(f)) {
						isMap = true
					}
				}
				stack = append(stack, &object{isMap: isMap, expect: true})
				parentKey = ""
				continue
			case '[':
				stack = append(stack, nil) // an array: its values have no keys
				parentKey = ""
				continue
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
		case string:
			if top != nil && top.expect {
				k := []byte(t)
				for _, seen := range top.keys {
					switch {
					case bytes.Equal(seen, k):
						return fmt.Errorf("ambiguous document: key %q twice in one object (offset %d)", t, dec.InputOffset())
					case !top.isMap && bytes.EqualFold(seen, k):
						return fmt.Errorf("ambiguous keys %q and %q: one field to encoding/json and runc (offset %d)", seen, t, dec.InputOffset())
					}
				}
				top.keys = append(top.keys, k)
				top.expect = false
				parentKey = t
				continue
			}
		}
		// A value ended: the next string in an object is a key again.
		if len(stack) > 0 && stack[len(stack)-1] != nil {
			stack[len(stack)-1].expect = true
		}
		parentKey = ""
	}
}
