package engineconf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	udiff "github.com/aymanbagabas/go-udiff"
)

// DockerDefaultPIDFile is where dockerd writes its PID unless daemon.json's
// "pidfile" says otherwise.
const DockerDefaultPIDFile = "/var/run/docker.pid"

// DockerOptions says how to register gpurun-runtime in daemon.json.
type DockerOptions struct {
	Name         string   // runtime name, "gpurun"
	Path         string   // absolute path of gpurun-runtime
	RuntimeArgs  []string // optional runtimeArgs
	SetAsDefault bool     // also make it "default-runtime"
}

// DockerChange says what InstallDocker did, so UninstallDocker can undo
// exactly that. It is meant to be kept (for instance as JSON) from the
// install that changed the file: a later install that finds everything in
// place reports Changed false and nothing to undo.
type DockerChange struct {
	// Changed says whether InstallDocker changed the document at all.
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
	// InstallDocker added one; uninstall takes it away again.
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
func (c DockerChange) MarshalJSON() ([]byte, error) {
	type plain DockerChange
	return json.Marshal(struct {
		plain
		PreviousRuntime string `json:"previousRuntime,omitempty"`
	}{plain(c), string(c.PreviousRuntime)})
}

// UnmarshalJSON decodes what MarshalJSON writes. A previousRuntime that is
// not a string is taken as the JSON text itself.
func (c *DockerChange) UnmarshalJSON(data []byte) error {
	type plain DockerChange
	var v struct {
		plain
		PreviousRuntime json.RawMessage `json:"previousRuntime,omitempty"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("decode docker change: %w", err)
	}
	*c = DockerChange(v.plain)
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

// djReserved says whether dockerd keeps name for its built-in runc.
func djReserved(name string) bool {
	return name == "runc" || name == "io.containerd.runc.v2"
}

// djRuntime is the runtimes.<Name> entry InstallDocker writes, in the field
// order it writes them (dockerd's types.Runtime spelling).
type djRuntime struct {
	Path string   `json:"path"`
	Args []string `json:"runtimeArgs,omitempty"`
}

// InstallDocker registers gpurun-runtime in the daemon.json document data
// and returns the new document and what changed. Empty or blank data
// stands for a missing daemon.json. Everything InstallDocker does not own
// is kept byte for byte: other keys, their order, spelling, numbers and
// layout. New keys go after the existing ones, laid out in the document's
// own style (indentation detected from the file; two spaces by default).
// A changed document ends with a newline (AddedNewline records one added).
// Installing into a document that already has the registration returns
// data unchanged with Changed false (and Chain filled in).
func InstallDocker(data []byte, o DockerOptions) ([]byte, DockerChange, error) {
	if err := o.djValidate(true); err != nil {
		return nil, DockerChange{}, fmt.Errorf("install docker runtime: %w", err)
	}
	bom, body := djSplitBOM(data)
	out, c, err := djInstall(body, o)
	if err != nil {
		return nil, DockerChange{}, err
	}
	if !c.Changed {
		return data, c, nil
	}
	return slices.Concat(bom, out), c, nil
}

// djInstall is InstallDocker on a document without a byte order mark.
func djInstall(data []byte, o DockerOptions) ([]byte, DockerChange, error) {
	var c DockerChange
	blank := len(bytes.Trim(data, djSpace)) == 0
	src := data
	if blank {
		src = []byte("{}")
	}
	top, st, err := djLoad(src)
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
		curIsString = json.Unmarshal(src[m.valStart:m.valEnd], &curDefault) == nil && src[m.valStart] == '"'
		if !curIsString && o.SetAsDefault {
			return nil, c, fmt.Errorf("install docker runtime: %s: default-runtime is %s, want a string",
				djPos(src, m.valStart), djKind(src[m.valStart]))
		}
	}
	c.Chain, err = djChain(src, top, curDefault, o)
	if err != nil {
		return nil, c, fmt.Errorf("install docker runtime: %w", err)
	}

	out, err := djPutRuntime(src, top, st, o, &c)
	if err != nil {
		return nil, c, fmt.Errorf("install docker runtime: %w", err)
	}

	if o.SetAsDefault && curDefault != o.Name {
		top, err = djParseObject(out, top.open)
		if err != nil {
			return nil, c, fmt.Errorf("install docker runtime: %w", err)
		}
		val := djQuote(o.Name)
		if di >= 0 {
			out = djReplaceValue(out, top, di, val, st)
			c.PreviousDefault, c.PreviousDefaultSet = curDefault, true
		} else {
			out = djInsert(out, top, true, st, djQuote("default-runtime"), val)
		}
		c.SetDefault = true
	}

	if !blank && bytes.Equal(out, src) {
		return data, DockerChange{Chain: c.Chain}, nil
	}
	c.Changed = true
	if !bytes.HasSuffix(out, []byte("\n")) {
		out = append(out, st.nl...)
		c.AddedNewline = !blank
	}
	return out, c, nil
}

// djPutRuntime makes runtimes.<Name> our entry, recording in c what it did.
func djPutRuntime(src []byte, top djObject, st djStyle, o DockerOptions, c *DockerChange) ([]byte, error) {
	entry := djCompact(djRuntime{Path: o.Path, Args: o.RuntimeArgs})
	withName := func() []byte {
		return slices.Concat([]byte("{"), djQuote(o.Name), []byte(":"), entry, []byte("}"))
	}
	ri, err := top.find(src, "runtimes", true)
	if err != nil {
		return nil, err
	}
	if ri < 0 {
		c.AddedRuntime, c.CreatedRuntimes = true, true
		return djInsert(src, top, true, st, djQuote("runtimes"), withName()), nil
	}
	m := top.members[ri]
	switch src[m.valStart] {
	case 'n': // "runtimes": null, which dockerd reads as no runtimes
		c.AddedRuntime, c.CreatedRuntimes, c.RuntimesWasNull = true, true, true
		return djReplaceValue(src, top, ri, withName(), st), nil
	case '{':
	default:
		return nil, fmt.Errorf("%s: runtimes is %s, want an object", djPos(src, m.valStart), djKind(src[m.valStart]))
	}
	rts, err := djParseObject(src, m.valStart)
	if err != nil {
		return nil, err
	}
	ni, err := rts.find(src, o.Name, false)
	if err != nil {
		return nil, err
	}
	if ni < 0 {
		c.AddedRuntime = true
		return djInsert(src, rts, top.multiline(src), st, djQuote(o.Name), entry), nil
	}
	nm := rts.members[ni]
	prev := src[nm.valStart:nm.valEnd]
	if djRuntimeIs(prev, o) {
		return src, nil
	}
	c.AddedRuntime = true
	c.PreviousRuntime = bytes.Clone(prev)
	return djReplaceValue(src, rts, ni, entry, st), nil
}

// UninstallDocker undoes what InstallDocker did according to c, and says
// whether it changed anything. It removes runtimes.<Name> (or puts back
// c.PreviousRuntime) only while that entry still runs o.Path (any path when
// o.Path is ""), removes the "runtimes" object only when InstallDocker
// created it and it is empty again, and restores "default-runtime" only
// while it still names o.Name, so an administrator's later choices stay.
// Everything else is kept byte for byte. Undoing twice changes nothing.
func UninstallDocker(data []byte, o DockerOptions, c DockerChange) ([]byte, bool, error) {
	if err := o.djValidate(false); err != nil {
		return nil, false, fmt.Errorf("uninstall docker runtime: %w", err)
	}
	bom, body := djSplitBOM(data)
	out, changed, err := djUninstall(body, o, c)
	if err != nil {
		return nil, false, err
	}
	if !changed {
		return data, false, nil
	}
	return slices.Concat(bom, out), true, nil
}

// djUninstall is UninstallDocker on a document without a byte order mark.
func djUninstall(data []byte, o DockerOptions, c DockerChange) ([]byte, bool, error) {
	if !c.Changed || len(bytes.Trim(data, djSpace)) == 0 {
		return data, false, nil
	}
	top, st, err := djLoad(data)
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
			if json.Unmarshal(out[m.valStart:m.valEnd], &cur) == nil && out[m.valStart] == '"' && cur == o.Name {
				if c.PreviousDefault != "" || c.PreviousDefaultSet {
					out = djReplaceValue(out, top, di, djQuote(c.PreviousDefault), st)
				} else {
					out = djRemove(out, top, di)
				}
			}
		}
	}

	if c.AddedRuntime {
		top, err = djParseObject(out, top.open)
		if err != nil {
			return nil, false, fmt.Errorf("uninstall docker runtime: %w", err)
		}
		out, err = djDropRuntime(out, top, st, o, c)
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
	return out, true, nil
}

// djDropRuntime removes or restores runtimes.<Name> as c says.
func djDropRuntime(data []byte, top djObject, st djStyle, o DockerOptions, c DockerChange) ([]byte, error) {
	ri, err := top.find(data, "runtimes", true)
	if err != nil || ri < 0 {
		return data, err
	}
	m := top.members[ri]
	if data[m.valStart] != '{' {
		return data, nil // not ours to fix any more
	}
	rts, err := djParseObject(data, m.valStart)
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
		if json.Unmarshal(data[nm.valStart:nm.valEnd], &cur) != nil || cur.Path != o.Path {
			return data, nil // someone else's entry now
		}
	}
	switch {
	case len(c.PreviousRuntime) > 0 && !json.Valid(c.PreviousRuntime):
		return nil, fmt.Errorf("the previous runtimes.%s entry to restore is not JSON: %q", o.Name, c.PreviousRuntime)
	case len(c.PreviousRuntime) > 0:
		return djRestoreValue(data, rts, ni, c.PreviousRuntime), nil
	case len(rts.members) == 1 && c.CreatedRuntimes && c.RuntimesWasNull:
		return djRestoreValue(data, top, ri, []byte("null")), nil
	case len(rts.members) == 1 && c.CreatedRuntimes:
		return djRemove(data, top, ri), nil
	default:
		return djRemove(data, rts, ni), nil
	}
}

// DockerDefaultDataRoot is dockerd's data-root unless daemon.json's
// "data-root" (or a --data-root flag) says otherwise.
const DockerDefaultDataRoot = "/var/lib/docker"

// DockerDataRoot returns daemon.json's "data-root" (or its pre-23.0 name,
// "graph"), or "" when neither is set or the document cannot be read.
// UsernsRemap says whether "userns-remap" is set: dockerd then keeps its
// containers in a subdirectory of the data-root named for the remapped ids.
func DockerDataRoot(data []byte) (root string, usernsRemap bool) {
	var cfg struct {
		DataRoot    string `json:"data-root"`
		Graph       string `json:"graph"`
		UsernsRemap string `json:"userns-remap"`
	}
	if _, body := djSplitBOM(data); json.Unmarshal(body, &cfg) != nil {
		return "", false
	}
	root = cfg.DataRoot
	if root == "" {
		root = cfg.Graph
	}
	return root, cfg.UsernsRemap != ""
}

// DockerPIDFile returns where dockerd writes its PID according to the
// daemon.json document data: its "pidfile", or DockerDefaultPIDFile when
// that is unset, empty or the document cannot be read.
func DockerPIDFile(data []byte) string {
	var cfg struct {
		PIDFile string `json:"pidfile"`
	}
	if _, body := djSplitBOM(data); json.Unmarshal(body, &cfg) != nil || cfg.PIDFile == "" {
		return DockerDefaultPIDFile
	}
	return cfg.PIDFile
}

// UnifiedDiff returns a unified diff (three lines of context) from before
// to after, both headers naming name, or "" when they are equal.
func UnifiedDiff(name string, before, after []byte) string {
	if bytes.Equal(before, after) {
		return ""
	}
	return udiff.Unified(name, name, string(before), string(after))
}

// djValidate checks the options; install needs a path, uninstall only a name.
func (o DockerOptions) djValidate(install bool) error {
	switch {
	case o.Name == "":
		return errors.New("runtime name is empty")
	case djReserved(o.Name):
		return fmt.Errorf("runtime name %q is reserved by dockerd", o.Name)
	case install && !filepath.IsAbs(o.Path):
		return fmt.Errorf("runtime path %q is not absolute", o.Path)
	}
	return nil
}

// djChain returns the path of the wrapper runtime that is the default now,
// if any (see DockerChange.Chain).
func djChain(data []byte, top djObject, def string, o DockerOptions) (string, error) {
	if def == "" || def == o.Name || djReserved(def) {
		return "", nil
	}
	ri, err := top.find(data, "runtimes", true)
	if err != nil || ri < 0 {
		return "", err
	}
	m := top.members[ri]
	if data[m.valStart] != '{' {
		return "", nil
	}
	rts, err := djParseObject(data, m.valStart)
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
	if json.Unmarshal(data[rts.members[i].valStart:rts.members[i].valEnd], &rt) != nil || rt.Path == "" {
		return "", nil
	}
	if rt.Path == o.Path || filepath.Base(rt.Path) == filepath.Base(o.Path) {
		return "", nil // chaining to ourselves would loop
	}
	return rt.Path, nil
}

// djRuntimeIs says whether the runtimes entry raw is exactly what
// InstallDocker writes for o: the same path and runtimeArgs, nothing else.
func djRuntimeIs(raw []byte, o DockerOptions) bool {
	if raw[0] != '{' {
		return false
	}
	obj, err := djParseObject(raw, 0)
	if err != nil {
		return false
	}
	seen := map[string]bool{}
	var path string
	var args []string
	for _, m := range obj.members {
		if seen[m.key] {
			return false
		}
		seen[m.key] = true
		v := raw[m.valStart:m.valEnd]
		switch m.key {
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

const djSpace = " \t\r\n"

// djMember is one member of a JSON object, located in the document.
type djMember struct {
	key              string // decoded
	keyStart, keyEnd int    // the key's quotes, inclusive..exclusive
	valStart, valEnd int    // the value's bytes
}

// djObject is a JSON object located in the document.
type djObject struct {
	open, close int // offsets of '{' and '}'
	members     []djMember
}

// djStyle is how the document is laid out, for the text we add.
type djStyle struct {
	nl    string // line ending
	unit  string // one level of indentation
	colon string // between a key and its value
	comma string // between members of a one-line object
}

// djLoad checks that data is one JSON object and returns it with its style.
func djLoad(data []byte) (djObject, djStyle, error) {
	if err := json.Unmarshal(data, new(json.RawMessage)); err != nil {
		return djObject{}, djStyle{}, djSyntaxError(data, err)
	}
	i := djSkipSpace(data, 0)
	if data[i] != '{' {
		return djObject{}, djStyle{}, fmt.Errorf("parse daemon.json: %s: top level is %s, want an object", djPos(data, i), djKind(data[i]))
	}
	top, err := djParseObject(data, i)
	if err != nil {
		return djObject{}, djStyle{}, err
	}
	return top, djDetectStyle(data, top), nil
}

// djSyntaxError names the line and column of a JSON syntax error.
func djSyntaxError(data []byte, err error) error {
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
			return fmt.Errorf("parse daemon.json: %s: unexpected end of JSON input", djPos(data, len(data)))
		}
	}
	return fmt.Errorf("parse daemon.json: %s: %w", djPos(data, max(int(se.Offset)-1, 0)), se)
}

// djDetectStyle reads the layout off the document: CRLF or LF, the
// smallest indentation any line has (one level), and the spacing around
// the first member's colon.
func djDetectStyle(data []byte, top djObject) djStyle {
	st := djStyle{nl: "\n", unit: "  ", colon: ": "}
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
		if sep := data[m.keyEnd:m.valStart]; !bytes.ContainsAny(sep, "\r\n") {
			st.colon = string(sep)
		}
	}
	st.comma = ","
	if strings.HasSuffix(st.colon, " ") {
		st.comma = ", "
	}
	return st
}

// djParseObject locates the members of the object whose '{' is at open in a
// document already known to be valid JSON.
func djParseObject(data []byte, open int) (djObject, error) {
	obj := djObject{open: open}
	i := djSkipSpace(data, open+1)
	for data[i] != '}' {
		if data[i] == ',' {
			i = djSkipSpace(data, i+1)
		}
		var m djMember
		m.keyStart = i
		m.keyEnd = djSkipValue(data, i)
		if err := json.Unmarshal(data[m.keyStart:m.keyEnd], &m.key); err != nil {
			return obj, fmt.Errorf("parse daemon.json: %s: %w", djPos(data, i), err)
		}
		i = djSkipSpace(data, m.keyEnd)
		i = djSkipSpace(data, i+1) // the colon
		m.valStart = i
		m.valEnd = djSkipValue(data, i)
		obj.members = append(obj.members, m)
		i = djSkipSpace(data, m.valEnd)
	}
	obj.close = i
	return obj, nil
}

// find returns the index of the member named key, or -1. A key that occurs
// twice (or, with fold, also under another letter case, which dockerd
// would refuse) is an error: which one dockerd reads is not ours to guess.
func (obj djObject) find(data []byte, key string, fold bool) (int, error) {
	idx := -1
	for i, m := range obj.members {
		switch {
		case m.key != key && !(fold && strings.EqualFold(m.key, key)):
			continue
		case m.key != key:
			return -1, fmt.Errorf("%s: key %q is another spelling of %q, which dockerd does not accept", djPos(data, m.keyStart), m.key, key)
		case idx >= 0:
			return -1, fmt.Errorf("%s: key %q appears twice", djPos(data, m.keyStart), key)
		}
		idx = i
	}
	return idx, nil
}

// multiline says whether the object's members start on lines of their own.
func (obj djObject) multiline(data []byte) bool {
	return len(obj.members) > 0 && bytes.ContainsAny(data[obj.open+1:obj.members[0].keyStart], "\n")
}

// djInsert adds key: value (compact JSON) as the object's last member, laid
// out like the object's members; an empty object is laid out on lines of
// its own when multi is set.
func djInsert(data []byte, obj djObject, multi bool, st djStyle, key, value []byte) []byte {
	var b bytes.Buffer
	switch {
	case len(obj.members) == 0:
		if !multi {
			return djSplice(data, obj.open+1, obj.close, slices.Concat(key, []byte(st.colon), djRender(value, st, false, "")))
		}
		outer := djLineIndent(data, obj.open)
		ind := outer + st.unit
		b.WriteString(st.nl + ind)
		b.Write(key)
		b.WriteString(st.colon)
		b.Write(djRender(value, st, true, ind))
		b.WriteString(st.nl + outer)
		return djSplice(data, obj.open+1, obj.close, b.Bytes())
	case obj.multiline(data):
		ind := djLineIndent(data, obj.members[0].keyStart)
		b.WriteString("," + st.nl + ind)
		b.Write(key)
		b.WriteString(st.colon)
		b.Write(djRender(value, st, true, ind))
	default:
		b.WriteString(st.comma)
		b.Write(key)
		b.WriteString(st.colon)
		b.Write(djRender(value, st, false, ""))
	}
	end := obj.members[len(obj.members)-1].valEnd
	return djSplice(data, end, end, b.Bytes())
}

// djReplaceValue puts value (compact JSON) in place of member i's value,
// laid out like the object's members.
func djReplaceValue(data []byte, obj djObject, i int, value []byte, st djStyle) []byte {
	m := obj.members[i]
	return djSplice(data, m.valStart, m.valEnd, djRender(value, st, obj.multiline(data), djLineIndent(data, m.keyStart)))
}

// djRestoreValue puts back raw, the exact text member i's value had.
func djRestoreValue(data []byte, obj djObject, i int, raw []byte) []byte {
	m := obj.members[i]
	return djSplice(data, m.valStart, m.valEnd, raw)
}

// djRemove deletes member i together with the separator that belongs to
// it, the exact inverse of djInsert.
func djRemove(data []byte, obj djObject, i int) []byte {
	switch n := len(obj.members); {
	case n == 1:
		return djSplice(data, obj.open+1, obj.close, nil)
	case i == n-1:
		return djSplice(data, obj.members[i-1].valEnd, obj.members[i].valEnd, nil)
	default:
		return djSplice(data, obj.members[i].keyStart, obj.members[i+1].keyStart, nil)
	}
}

// djRender lays out compact JSON either inline (with the document's colon
// and comma spacing) or over lines, each starting with prefix and one unit
// per level, the first line excepted.
func djRender(compact []byte, st djStyle, multi bool, prefix string) []byte {
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

// djCompact encodes v as compact JSON without HTML escaping.
func djCompact(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("engineconf: encode %T: %v", v, err)) // strings and slices of strings always encode
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// djQuote returns s as a JSON string.
func djQuote(s string) []byte { return djCompact(s) }

// djSplice returns data with data[from:to] replaced by text, in new memory.
func djSplice(data []byte, from, to int, text []byte) []byte {
	return slices.Concat(data[:from], text, data[to:])
}

// djLineIndent returns the leading blanks of the line holding pos.
func djLineIndent(data []byte, pos int) string {
	start := bytes.LastIndexByte(data[:pos], '\n') + 1
	end := start
	for end < pos && (data[end] == ' ' || data[end] == '\t') {
		end++
	}
	return string(data[start:end])
}

// djSplitBOM splits off a UTF-8 byte order mark, which dockerd skips and
// editors on Windows write.
func djSplitBOM(data []byte) (bom, body []byte) {
	if bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) {
		return data[:3], data[3:]
	}
	return nil, data
}

// djSkipSpace returns the offset of the first non-blank byte at or after i.
func djSkipSpace(data []byte, i int) int {
	for i < len(data) && strings.IndexByte(djSpace, data[i]) >= 0 {
		i++
	}
	return i
}

// djSkipValue returns the offset just past the JSON value starting at i, in
// a document already known to be valid.
func djSkipValue(data []byte, i int) int {
	depth := 0
	inString, escaped := false, false
	for ; i < len(data); i++ {
		ch := data[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case ch == '\\':
				escaped = true
			case ch == '"':
				inString = false
				if depth == 0 {
					return i + 1
				}
			}
			continue
		}
		switch ch {
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
			if depth < 0 {
				return i // the end of a scalar at the end of its container
			}
		case ',', ' ', '\t', '\r', '\n':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

// djPos names the line and column (both from 1, the column in characters)
// of the byte at pos.
func djPos(data []byte, pos int) string {
	pos = min(pos, len(data))
	start := bytes.LastIndexByte(data[:pos], '\n') + 1
	line := bytes.Count(data[:pos], []byte("\n")) + 1
	return fmt.Sprintf("line %d, column %d", line, utf8.RuneCount(data[start:pos])+1)
}

// djKind names the kind of JSON value that starts with ch.
func djKind(ch byte) string {
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
