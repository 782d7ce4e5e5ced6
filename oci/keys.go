package oci

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// mapFields are the spec's fields whose JSON objects are maps, not
// structs: encoding/json matches their keys exactly, not case-folded.
var mapFields = []string{"annotations", "sysctl"}

// A keyRule says which parts of a JSON object checkKeys reads: the keys it
// names, each by its own rule, where a nil rule reads the value whole.
type keyRule map[string]keyRule

// readKeys are the parts of the spec gpurun reads (specFields). checkKeys
// checks the keys of the objects on the way to them and in them, and skips
// the rest of the document (a seccomp profile is most of Docker's
// config.json), which runc decodes and checks itself.
func readKeys() keyRule {
	return keyRule{
		"process": nil, "root": nil, "mounts": nil, "hooks": nil, "annotations": nil,
		"linux": {"devices": nil, "namespaces": nil, "resources": {"memory": nil}},
	}
}

// checkKeys refuses a JSON document in which an object gpurun reads holds
// the same key twice, or — outside the spec's maps — two keys that
// encoding/json (and so runc) folds into one field ("mounts" and "Mounts",
// or "mountſ" with the long s). Each reader would take the last, but which
// of them the engine meant is anybody's guess: no engine writes such a
// document, and gpurun does not size a container (or grow a pod's tmpfs)
// on a guess. The top-level object and the parts readKeys names are checked.
func checkKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return err // not an object: the decoders say so
	}
	return checkObject(dec, false, readKeys(), false)
}

// checkValue checks the value that follows, under key: every object in it
// when whole, else the parts rule names.
func checkValue(dec *json.Decoder, key string, rule keyRule, whole bool) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		isMap := slices.ContainsFunc(mapFields, func(f string) bool { return bytes.EqualFold([]byte(key), []byte(f)) })
		return checkObject(dec, isMap, rule, whole)
	case json.Delim('['):
		for dec.More() {
			if err := checkValue(dec, "", rule, whole); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ']'
		return err
	}
	return nil // a scalar
}

// checkObject checks the keys of the object whose '{' dec has just read,
// and then its values as checkValue does; a value neither whole nor named
// by rule is skipped.
func checkObject(dec *json.Decoder, isMap bool, rule keyRule, whole bool) error {
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		k, _ := tok.(string)
		for _, seen := range keys {
			switch {
			case seen == k:
				return fmt.Errorf("ambiguous document: key %q twice in one object (offset %d)", k, dec.InputOffset())
			case !isMap && bytes.EqualFold([]byte(seen), []byte(k)):
				return fmt.Errorf("ambiguous keys %q and %q: one field to encoding/json and runc (offset %d)", seen, k, dec.InputOffset())
			}
		}
		keys = append(keys, k)
		if whole {
			err = checkValue(dec, k, nil, true)
		} else if sub, ok := lookupFold(rule, k); ok {
			err = checkValue(dec, k, sub, sub == nil)
		} else {
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	return err
}

// lookupFold finds key in rule as encoding/json matches a struct's fields:
// case-folded.
func lookupFold(rule keyRule, key string) (keyRule, bool) {
	for k, sub := range rule {
		if bytes.EqualFold([]byte(k), []byte(key)) {
			return sub, true
		}
	}
	return nil, false
}
