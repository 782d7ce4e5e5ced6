// Package docker registers gpurun-runtime in dockerd's daemon.json: a
// runtimes entry and, when asked, default-runtime, chaining to a wrapper
// runtime (NVIDIA's) that was the default. Every byte it does not own is
// kept (other keys, their order, spelling, numbers and layout), a second
// install changes nothing, and uninstall undoes exactly what install did.
// Every edit is checked the way containerd's are: the result is decoded
// again and compared with the document before it, and an edit that would
// change anything but gpurun's keys is refused. Positions in errors follow
// package textpos. The editor's functions are pure (bytes in, bytes out).
//
// It is also the one reader of daemon.json (ReadDaemonJSON): install,
// doctor and whoever else needs what dockerd reads there (its data-root,
// with userns-remap's subdirectory, pid file, runtimes, default
// /dev/shm size) read it through Daemon, and dockerd's own flags through
// ParseFlags. Daemon.Root reads the node's /etc/passwd, /etc/subuid and
// /etc/subgid and follows the data-root's links, as dockerd does when it
// starts.
package docker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpurun/gpurun/internal/cfgtree"
	"github.com/gpurun/gpurun/internal/jsonscan"
	"github.com/gpurun/gpurun/internal/textpos"
)

// DefaultPIDFile is where dockerd writes its PID unless daemon.json's
// "pidfile" says otherwise.
const DefaultPIDFile = "/var/run/docker.pid"

// Options says how to register gpurun-runtime in daemon.json.
type Options struct {
	Name         string   // runtime name, "gpurun"
	Path         string   // absolute path of gpurun-runtime
	RuntimeArgs  []string // optional runtimeArgs
	SetAsDefault bool     // also make it "default-runtime"
}

// Change says what Install did, so Uninstall can undo
// exactly that. It is meant to be kept (for instance as JSON) from the
// install that changed the file: a later install that finds everything in
// place reports Changed false and nothing to undo.
type Change struct {
	// Changed says whether Install changed the document at all.
	Changed bool `json:"changed"`
	// AddedRuntime says runtimes.<Name> was added or replaced by us.
	AddedRuntime bool `json:"addedRuntime,omitempty"`
	// PreviousRuntime is the exact text of the runtimes.<Name> entry that
	// was there before, if any; uninstall puts it back.
	PreviousRuntime json.RawMessage `json:"previousRuntime,omitempty"`
	// CreatedRuntimes says the "runtimes" object is ours: it was absent
	// (or null, see RuntimesWasNull) and uninstall removes it once empty.
	CreatedRuntimes bool `json:"createdRuntimes,omitempty"`
	// RuntimesWasNull says "runtimes" was present as null (which dockerd
	// reads as no runtimes); uninstall puts the null back.
	RuntimesWasNull bool `json:"runtimesWasNull,omitempty"`
	// SetDefault says we set "default-runtime".
	SetDefault bool `json:"setDefault,omitempty"`
	// PreviousDefault is "default-runtime" before; "" means the key was
	// absent, unless PreviousDefaultSet says it was present as "".
	PreviousDefault string `json:"previousDefault,omitempty"`
	// PreviousDefaultSet says "default-runtime" was present before, so
	// uninstall restores it even when PreviousDefault is "".
	PreviousDefaultSet bool `json:"previousDefaultSet,omitempty"`
	// AddedNewline says the document did not end with a newline and
	// Install added one; uninstall takes it away again.
	AddedNewline bool `json:"addedNewline,omitempty"`
	// Chain is the low-level runtime gpurun-runtime must exec so an
	// existing wrapper keeps working: when the default runtime before the
	// change is a runtime defined in "runtimes" with a path (such as
	// "nvidia", path nvidia-container-runtime), Chain is that path, as
	// written (it may be a bare name that dockerd looks up in $PATH).
	// It is "" when the default is absent, runc, io.containerd.runc.v2,
	// <Name> itself, a runtime without a path (a shim v2 runtimeType), or
	// a runtime whose path is gpurun-runtime.
	Chain string `json:"chain,omitempty"`
}

// MarshalJSON encodes the change for keeping, PreviousRuntime as a JSON
// string holding its exact text: encoding/json would compact a
// json.RawMessage, and uninstall could then not restore its layout.
func (c Change) MarshalJSON() ([]byte, error) {
	type plain Change
	return json.Marshal(struct {
		plain
		PreviousRuntime string `json:"previousRuntime,omitempty"`
	}{plain(c), string(c.PreviousRuntime)})
}

// UnmarshalJSON decodes what MarshalJSON writes. A previousRuntime that is
// not a string is taken as the JSON text itself.
func (c *Change) UnmarshalJSON(data []byte) error {
	type plain Change
	var v struct {
		plain
		PreviousRuntime json.RawMessage `json:"previousRuntime,omitempty"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("decode docker change: %w", err)
	}
	*c = Change(v.plain)
	c.PreviousRuntime = nil
	switch raw := v.PreviousRuntime; {
	case len(raw) == 0 || string(raw) == "null":
	case raw[0] == '"':
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return fmt.Errorf("decode docker change: previousRuntime: %w", err)
		}
		if text != "" {
			c.PreviousRuntime = json.RawMessage(text)
		}
	default:
		c.PreviousRuntime = bytes.Clone(raw)
	}
	return nil
}

// reserved says whether dockerd keeps name for its built-in runc.
func reserved(name string) bool {
	return name == "runc" || name == "io.containerd.runc.v2"
}

// runtimeEntry is the runtimes.<Name> entry Install writes, in the field
// order it writes them (dockerd's types.Runtime spelling).
type runtimeEntry struct {
	Path string   `json:"path"`
	Args []string `json:"runtimeArgs,omitempty"`
}

// Install registers gpurun-runtime in the daemon.json document data
// and returns the new document and what changed. Empty or blank data
// stands for a missing daemon.json. Everything Install does not own
// is kept byte for byte: other keys, their order, spelling, numbers and
// layout. New keys go after the existing ones, laid out in the document's
// own style (indentation detected from the file; two spaces by default).
// A changed document ends with a newline (AddedNewline records one added).
// Installing into a document that already has the registration returns
// data unchanged with Changed false (and Chain filled in).
func Install(data []byte, o Options) ([]byte, Change, error) {
	if err := o.validate(true); err != nil {
		return nil, Change{}, fmt.Errorf("install docker runtime: %w", err)
	}
	bom, body := splitBOM(data)
	out, c, err := install(body, o)
	if err != nil {
		return nil, Change{}, err
	}
	if !c.Changed {
		return data, c, nil
	}
	return slices.Concat(bom, out), c, nil
}

// install is Install on a document without a byte order mark.
func install(data []byte, o Options) ([]byte, Change, error) {
	var c Change
	blank := len(bytes.Trim(data, space)) == 0
	src := data
	if blank {
		src = []byte("{}")
	}
	top, st, err := load(src)
	if err != nil {
		return nil, c, fmt.Errorf("install docker runtime: %w", err)
	}

	// The default runtime as it is now, and what gpurun-runtime must chain to.
	di, err := top.find(src, "default-runtime", true)
	if err != nil {
		return nil, c, fmt.Errorf("install docker runtime: %w", err)
	}
	var curDefault string
	curIsString := false
	if di >= 0 {
		m := top.members[di]
		curIsString = json.Unmarshal(src[m.ValStart:m.ValEnd], &curDefault) == nil && src[m.ValStart] == '"'
		if !curIsString && o.SetAsDefault {
			return nil, c, fmt.Errorf("install docker runtime: %s: default-runtime is %s, want a string",
				pos(src, m.ValStart), kind(src[m.ValStart]))
		}
	}
	c.Chain, err = chain(src, top, curDefault, o)
	if err != nil {
		return nil, c, fmt.Errorf("install docker runtime: %w", err)
	}

	out, err := putRuntime(src, top, st, o, &c)
	if err != nil {
		return nil, c, fmt.Errorf("install docker runtime: %w", err)
	}

	if o.SetAsDefault && curDefault != o.Name {
		top, err = parseObject(out, top.open)
		if err != nil {
			return nil, c, fmt.Errorf("install docker runtime: %w", err)
		}
		val := quote(o.Name)
		if di >= 0 {
			out = replaceValue(out, top, di, val, st)
			c.PreviousDefault, c.PreviousDefaultSet = curDefault, true
		} else {
			out = insert(out, top, true, st, quote("default-runtime"), val)
		}
		c.SetDefault = true
	}

	if !blank && bytes.Equal(out, src) {
		return data, Change{Chain: c.Chain}, nil
	}
	if err := checkInstall(src, out, o, c); err != nil {
		return nil, c, fmt.Errorf("install docker runtime: %w", err)
	}
	c.Changed = true
	if !bytes.HasSuffix(out, []byte("\n")) {
		out = append(out, st.nl...)
		c.AddedNewline = !blank
	}
	return out, c, nil
}

// putRuntime makes runtimes.<Name> our entry, recording in c what it did.
func putRuntime(src []byte, top object, st style, o Options, c *Change) ([]byte, error) {
	entry := compact(runtimeEntry{Path: o.Path, Args: o.RuntimeArgs})
	withName := func() []byte {
		return slices.Concat([]byte("{"), quote(o.Name), []byte(":"), entry, []byte("}"))
	}
	ri, err := top.find(src, "runtimes", true)
	if err != nil {
		return nil, err
	}
	if ri < 0 {
		c.AddedRuntime, c.CreatedRuntimes = true, true
		return insert(src, top, true, st, quote("runtimes"), withName()), nil
	}
	m := top.members[ri]
	switch src[m.ValStart] {
	case 'n': // "runtimes": null, which dockerd reads as no runtimes
		c.AddedRuntime, c.CreatedRuntimes, c.RuntimesWasNull = true, true, true
		return replaceValue(src, top, ri, withName(), st), nil
	case '{':
	default:
		return nil, fmt.Errorf("%s: runtimes is %s, want an object", pos(src, m.ValStart), kind(src[m.ValStart]))
	}
	rts, err := parseObject(src, m.ValStart)
	if err != nil {
		return nil, err
	}
	ni, err := rts.find(src, o.Name, false)
	if err != nil {
		return nil, err
	}
	if ni < 0 {
		c.AddedRuntime = true
		return insert(src, rts, top.multiline(src), st, quote(o.Name), entry), nil
	}
	nm := rts.members[ni]
	prev := src[nm.ValStart:nm.ValEnd]
	if runtimeIs(prev, o) {
		return src, nil
	}
	c.AddedRuntime = true
	c.PreviousRuntime = bytes.Clone(prev)
	return replaceValue(src, rts, ni, entry, st), nil
}

// Uninstall undoes what Install did according to c, and says
// whether it changed anything. It removes runtimes.<Name> (or puts back
// c.PreviousRuntime) only while that entry still runs o.Path (any path when
// o.Path is ""), removes the "runtimes" object only when Install
// created it and it is empty again, and restores "default-runtime" only
// while it still names o.Name, so an administrator's later choices stay.
// Everything else is kept byte for byte. Undoing twice changes nothing.
func Uninstall(data []byte, o Options, c Change) ([]byte, bool, error) {
	if err := o.validate(false); err != nil {
		return nil, false, fmt.Errorf("uninstall docker runtime: %w", err)
	}
	bom, body := splitBOM(data)
	out, changed, err := uninstall(body, o, c)
	if err != nil {
		return nil, false, err
	}
	if !changed {
		return data, false, nil
	}
	return slices.Concat(bom, out), true, nil
}

// uninstall is Uninstall on a document without a byte order mark.
func uninstall(data []byte, o Options, c Change) ([]byte, bool, error) {
	if !c.Changed || len(bytes.Trim(data, space)) == 0 {
		return data, false, nil
	}
	top, st, err := load(data)
	if err != nil {
		return nil, false, fmt.Errorf("uninstall docker runtime: %w", err)
	}
	out := data

	if c.SetDefault {
		di, err := top.find(out, "default-runtime", true)
		if err != nil {
			return nil, false, fmt.Errorf("uninstall docker runtime: %w", err)
		}
		var cur string
		if di >= 0 {
			m := top.members[di]
			if json.Unmarshal(out[m.ValStart:m.ValEnd], &cur) == nil && out[m.ValStart] == '"' && cur == o.Name {
				if c.PreviousDefault != "" || c.PreviousDefaultSet {
					out = replaceValue(out, top, di, quote(c.PreviousDefault), st)
				} else {
					out = remove(out, top, di)
				}
			}
		}
	}

	if c.AddedRuntime {
		top, err = parseObject(out, top.open)
		if err != nil {
			return nil, false, fmt.Errorf("uninstall docker runtime: %w", err)
		}
		out, err = dropRuntime(out, top, st, o, c)
		if err != nil {
			return nil, false, fmt.Errorf("uninstall docker runtime: %w", err)
		}
	}

	if bytes.Equal(out, data) {
		return data, false, nil
	}
	if c.AddedNewline {
		out = bytes.TrimSuffix(out, []byte(st.nl))
	}
	allowed := [][]string{{"runtimes", o.Name}, {"default-runtime"}}
	if c.CreatedRuntimes {
		allowed = append(allowed, []string{"runtimes"})
	}
	if err := checkOnly(data, out, allowed); err != nil {
		return nil, false, fmt.Errorf("uninstall docker runtime: %w", err)
	}
	return out, true, nil
}

// dropRuntime removes or restores runtimes.<Name> as c says.
func dropRuntime(data []byte, top object, st style, o Options, c Change) ([]byte, error) {
	ri, err := top.find(data, "runtimes", true)
	if err != nil || ri < 0 {
		return data, err
	}
	m := top.members[ri]
	if data[m.ValStart] != '{' {
		return data, nil // not ours to fix any more
	}
	rts, err := parseObject(data, m.ValStart)
	if err != nil {
		return nil, err
	}
	ni, err := rts.find(data, o.Name, false)
	if err != nil || ni < 0 {
		return data, err
	}
	nm := rts.members[ni]
	if o.Path != "" {
		var cur struct {
			Path string `json:"path"`
		}
		if json.Unmarshal(data[nm.ValStart:nm.ValEnd], &cur) != nil || cur.Path != o.Path {
			return data, nil // someone else's entry now
		}
	}
	switch {
	case len(c.PreviousRuntime) > 0 && !json.Valid(c.PreviousRuntime):
		return nil, fmt.Errorf("the previous runtimes.%s entry to restore is not JSON: %q", o.Name, c.PreviousRuntime)
	case len(c.PreviousRuntime) > 0:
		return restoreValue(data, rts, ni, c.PreviousRuntime), nil
	case len(rts.members) == 1 && c.CreatedRuntimes && c.RuntimesWasNull:
		return restoreValue(data, top, ri, []byte("null")), nil
	case len(rts.members) == 1 && c.CreatedRuntimes:
		return remove(data, top, ri), nil
	default:
		return remove(data, rts, ni), nil
	}
}

// validate checks the options; install needs a path, uninstall only a name.
func (o Options) validate(install bool) error {
	switch {
	case o.Name == "":
		return errors.New("runtime name is empty")
	case reserved(o.Name):
		return fmt.Errorf("runtime name %q is reserved by dockerd", o.Name)
	case install && !filepath.IsAbs(o.Path):
		return fmt.Errorf("runtime path %q is not absolute", o.Path)
	}
	return nil
}

// chain returns the path of the wrapper runtime that is the default now,
// if any (see Change.Chain).
func chain(data []byte, top object, def string, o Options) (string, error) {
	if def == "" || def == o.Name || reserved(def) {
		return "", nil
	}
	ri, err := top.find(data, "runtimes", true)
	if err != nil || ri < 0 {
		return "", err
	}
	m := top.members[ri]
	if data[m.ValStart] != '{' {
		return "", nil
	}
	rts, err := parseObject(data, m.ValStart)
	if err != nil {
		return "", err
	}
	i, err := rts.find(data, def, false)
	if err != nil || i < 0 {
		return "", err
	}
	// Decoded as dockerd decodes it (types.Runtime).
	var rt struct {
		Path string `json:"path"`
	}
	if json.Unmarshal(data[rts.members[i].ValStart:rts.members[i].ValEnd], &rt) != nil || rt.Path == "" {
		return "", nil
	}
	if rt.Path == o.Path || filepath.Base(rt.Path) == filepath.Base(o.Path) {
		return "", nil // chaining to ourselves would loop
	}
	return rt.Path, nil
}

// runtimeIs says whether the runtimes entry raw is exactly what
// Install writes for o: the same path and runtimeArgs, nothing else.
func runtimeIs(raw []byte, o Options) bool {
	if raw[0] != '{' {
		return false
	}
	obj, err := parseObject(raw, 0)
	if err != nil {
		return false
	}
	seen := map[string]bool{}
	var path string
	var args []string
	for _, m := range obj.members {
		if seen[m.Key] {
			return false
		}
		seen[m.Key] = true
		v := raw[m.ValStart:m.ValEnd]
		switch m.Key {
		case "path":
			if v[0] != '"' || json.Unmarshal(v, &path) != nil {
				return false
			}
		case "runtimeArgs":
			if json.Unmarshal(v, &args) != nil {
				return false
			}
		default:
			return false
		}
	}
	// A null or empty runtimeArgs is the same as none (slices.Equal agrees).
	return seen["path"] && path == o.Path && slices.Equal(args, o.RuntimeArgs)
}

// --- a byte-preserving view of a JSON document ---

// space is JSON's white space.
const space = " \t\r\n"

// object is a JSON object located in the document.
type object struct {
	open, close int // offsets of '{' and '}'
	members     []jsonscan.Member
}

// style is how the document is laid out, for the text we add.
type style struct {
	nl    string // line ending
	unit  string // one level of indentation
	colon string // between a key and its value
	comma string // between members of a one-line object
}

// load checks that data is one JSON object and returns it with its style.
func load(data []byte) (object, style, error) {
	if err := json.Unmarshal(data, new(json.RawMessage)); err != nil {
		return object{}, style{}, syntaxError(data, err)
	}
	i := jsonscan.Space(data, 0)
	if data[i] != '{' {
		return object{}, style{}, fmt.Errorf("parse daemon.json: %s: top level is %s, want an object", pos(data, i), kind(data[i]))
	}
	top, err := parseObject(data, i)
	if err != nil {
		return object{}, style{}, err
	}
	return top, detectStyle(data, top), nil
}

// syntaxError names the line and column of a JSON syntax error.
func syntaxError(data []byte, err error) error {
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return fmt.Errorf("parse daemon.json: %w", err)
	}
	// The offset counts the offending byte; at the end of the input that
	// byte may be the last one or the end itself. Past the end, one more
	// blank moves an end-of-input error but not the other kind.
	if se.Offset >= int64(len(data)) {
		var se2 *json.SyntaxError
		err2 := json.Unmarshal(append(bytes.Clone(data), '\n'), new(json.RawMessage))
		if !errors.As(err2, &se2) || se2.Offset > int64(len(data)) {
			return fmt.Errorf("parse daemon.json: %s: unexpected end of JSON input", pos(data, len(data)))
		}
	}
	return fmt.Errorf("parse daemon.json: %s: %w", pos(data, max(int(se.Offset)-1, 0)), se)
}

// detectStyle reads the layout off the document: CRLF or LF, the
// smallest indentation any line has (one level), and the spacing around
// the first member's colon.
func detectStyle(data []byte, top object) style {
	st := style{nl: "\n", unit: "  ", colon: ": "}
	if bytes.Contains(data, []byte("\r\n")) {
		st.nl = "\r\n"
	}
	unit := ""
	for line := range bytes.Lines(data[top.open:]) {
		ws := line[:len(line)-len(bytes.TrimLeft(line, " \t"))]
		if len(ws) > 0 && len(ws) < len(line) && line[len(ws)] != '\r' && line[len(ws)] != '\n' &&
			(unit == "" || len(ws) < len(unit)) {
			unit = string(ws)
		}
	}
	if unit != "" {
		st.unit = unit
	}
	if len(top.members) > 0 {
		m := top.members[0]
		if sep := data[m.KeyEnd:m.ValStart]; !bytes.ContainsAny(sep, "\r\n") {
			st.colon = string(sep)
		}
	}
	st.comma = ","
	if strings.HasSuffix(st.colon, " ") {
		st.comma = ", "
	}
	return st
}

// parseObject locates the members of the object whose '{' is at open in a
// document already known to be valid JSON.
func parseObject(data []byte, open int) (object, error) {
	members, end := jsonscan.Object(data, open)
	if end >= len(data) {
		return object{}, fmt.Errorf("parse daemon.json: %s: the object does not end", pos(data, open))
	}
	return object{open: open, close: end, members: members}, nil
}

// find returns the index of the member named key, or -1. A key that occurs
// twice (or, with fold, also under another letter case, which dockerd
// would refuse) is an error: which one dockerd reads is not ours to guess.
func (obj object) find(data []byte, key string, fold bool) (int, error) {
	idx := -1
	for i, m := range obj.members {
		switch {
		case m.Key != key && !(fold && strings.EqualFold(m.Key, key)):
			continue
		case m.Key != key:
			return -1, fmt.Errorf("%s: key %q is another spelling of %q, which dockerd does not accept", pos(data, m.KeyStart), m.Key, key)
		case idx >= 0:
			return -1, fmt.Errorf("%s: key %q appears twice", pos(data, m.KeyStart), key)
		}
		idx = i
	}
	return idx, nil
}

// multiline says whether the object's members start on lines of their own.
func (obj object) multiline(data []byte) bool {
	return len(obj.members) > 0 && bytes.ContainsAny(data[obj.open+1:obj.members[0].KeyStart], "\n")
}

// insert adds key: value (compact JSON) as the object's last member, laid
// out like the object's members; an empty object is laid out on lines of
// its own when multi is set.
func insert(data []byte, obj object, multi bool, st style, key, value []byte) []byte {
	var b bytes.Buffer
	switch {
	case len(obj.members) == 0:
		if !multi {
			return splice(data, obj.open+1, obj.close, slices.Concat(key, []byte(st.colon), render(value, st, false, "")))
		}
		outer := lineIndent(data, obj.open)
		ind := outer + st.unit
		b.WriteString(st.nl + ind)
		b.Write(key)
		b.WriteString(st.colon)
		b.Write(render(value, st, true, ind))
		b.WriteString(st.nl + outer)
		return splice(data, obj.open+1, obj.close, b.Bytes())
	case obj.multiline(data):
		ind := lineIndent(data, obj.members[0].KeyStart)
		b.WriteString("," + st.nl + ind)
		b.Write(key)
		b.WriteString(st.colon)
		b.Write(render(value, st, true, ind))
	default:
		b.WriteString(st.comma)
		b.Write(key)
		b.WriteString(st.colon)
		b.Write(render(value, st, false, ""))
	}
	end := obj.members[len(obj.members)-1].ValEnd
	return splice(data, end, end, b.Bytes())
}

// replaceValue puts value (compact JSON) in place of member i's value,
// laid out like the object's members.
func replaceValue(data []byte, obj object, i int, value []byte, st style) []byte {
	m := obj.members[i]
	return splice(data, m.ValStart, m.ValEnd, render(value, st, obj.multiline(data), lineIndent(data, m.KeyStart)))
}

// restoreValue puts back raw, the exact text member i's value had.
func restoreValue(data []byte, obj object, i int, raw []byte) []byte {
	m := obj.members[i]
	return splice(data, m.ValStart, m.ValEnd, raw)
}

// remove deletes member i together with the separator that belongs to
// it, the exact inverse of insert.
func remove(data []byte, obj object, i int) []byte {
	switch n := len(obj.members); {
	case n == 1:
		return splice(data, obj.open+1, obj.close, nil)
	case i == n-1:
		return splice(data, obj.members[i-1].ValEnd, obj.members[i].ValEnd, nil)
	default:
		return splice(data, obj.members[i].KeyStart, obj.members[i+1].KeyStart, nil)
	}
}

// render lays out compact JSON either inline (with the document's colon
// and comma spacing) or over lines, each starting with prefix and one unit
// per level, the first line excepted.
func render(compact []byte, st style, multi bool, prefix string) []byte {
	var b bytes.Buffer
	depth := 0
	newline := func() {
		b.WriteString(st.nl + prefix + strings.Repeat(st.unit, depth))
	}
	inString, escaped := false, false
	for i := 0; i < len(compact); i++ {
		ch := compact[i]
		if inString {
			b.WriteByte(ch)
			switch {
			case escaped:
				escaped = false
			case ch == '\\':
				escaped = true
			case ch == '"':
				inString = false
			}
			continue
		}
		switch ch {
		case '"':
			inString = true
			b.WriteByte(ch)
		case '{', '[':
			b.WriteByte(ch)
			if i+1 < len(compact) && (compact[i+1] == '}' || compact[i+1] == ']') {
				b.WriteByte(compact[i+1])
				i++
				continue
			}
			depth++
			if multi {
				newline()
			}
		case '}', ']':
			depth--
			if multi {
				newline()
			}
			b.WriteByte(ch)
		case ',':
			if multi {
				b.WriteByte(',')
				newline()
			} else {
				b.WriteString(st.comma)
			}
		case ':':
			b.WriteString(st.colon)
		default:
			b.WriteByte(ch)
		}
	}
	return b.Bytes()
}

// compact encodes v as compact JSON without HTML escaping.
func compact(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("engineconf: encode %T: %v", v, err)) // strings and slices of strings always encode
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// quote returns s as a JSON string.
func quote(s string) []byte { return compact(s) }

// splice returns data with data[from:to] replaced by text, in new memory.
func splice(data []byte, from, to int, text []byte) []byte {
	return slices.Concat(data[:from], text, data[to:])
}

// lineIndent returns the leading blanks of the line holding pos.
func lineIndent(data []byte, pos int) string {
	start := bytes.LastIndexByte(data[:pos], '\n') + 1
	end := start
	for end < pos && (data[end] == ' ' || data[end] == '\t') {
		end++
	}
	return string(data[start:end])
}

// splitBOM splits off a UTF-8 byte order mark, which dockerd skips and
// editors on Windows write.
func splitBOM(data []byte) (bom, body []byte) {
	if bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) {
		return data[:3], data[3:]
	}
	return nil, data
}

// pos names the line and column of the byte at off (package textpos's
// convention: from 1, columns in characters).
func pos(data []byte, off int) string {
	return textpos.Of(data, off).String()
}

// kind names the kind of JSON value that starts with ch.
func kind(ch byte) string {
	switch ch {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// decodeTree decodes a JSON object as dockerd reads it into a tree for
// cfgtree (numbers kept as written).
func decodeTree(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// checkInstall checks that out, the document Install made of src, decodes
// to src plus exactly what c says Install did: runtimes.<Name> is gpurun's
// entry (when AddedRuntime) and default-runtime names it (when
// SetDefault), and nothing else differs.
func checkInstall(src, out []byte, o Options, c Change) error {
	want, err := decodeTree(src)
	if err != nil {
		return fmt.Errorf("gpurun's edit: %w (a bug; nothing written)", err)
	}
	got, err := decodeTree(out)
	if err != nil {
		return fmt.Errorf("gpurun's edit does not parse (a bug; nothing written): %w", err)
	}
	if c.AddedRuntime {
		entry := map[string]any{"path": o.Path}
		if len(o.RuntimeArgs) > 0 {
			args := make([]any, len(o.RuntimeArgs))
			for i, a := range o.RuntimeArgs {
				args[i] = a
			}
			entry["runtimeArgs"] = args
		}
		cfgtree.Set(want, []string{"runtimes", o.Name}, entry)
	}
	if c.SetDefault {
		want["default-runtime"] = o.Name
	}
	if p, ok := cfgtree.Equal(want, got); !ok {
		return fmt.Errorf("refusing to edit: the result would differ at %s from what gpurun intends (a bug; nothing written)", strings.Join(p, "."))
	}
	return nil
}

// checkOnly checks that out decodes to what data does but under the
// allowed paths.
func checkOnly(data, out []byte, allowed [][]string) error {
	before, err := decodeTree(data)
	if err != nil {
		return fmt.Errorf("gpurun's edit: %w (a bug; nothing written)", err)
	}
	after, err := decodeTree(out)
	if err != nil {
		return fmt.Errorf("gpurun's edit does not parse (a bug; nothing written): %w", err)
	}
	if ch, found := cfgtree.Only(before, after, allowed); found {
		return fmt.Errorf("refusing to edit: the result would change %s (a bug; nothing written)", strings.Join(ch.Path, "."))
	}
	return nil
}
