package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// maxPolicySize bounds what Load reads: a policy is hand-written text, and a
// bigger file is a mistake (or not a policy).
const maxPolicySize = 1 << 20

// maxReported caps how many problems one Parse reports; past that the rest
// are usually consequences of the first ones.
const maxReported = 20

// The raw shape of the file. Pointers and `any` tell "absent" from "zero" and
// let us report a wrong TOML type with a hint instead of a decoder message.
type fileDoc struct {
	Version  *int64               `toml:"version"`
	Defaults *defaultsDoc         `toml:"defaults"`
	Ops      map[string]*opDoc    `toml:"ops"`
	Agents   map[string]*agentDoc `toml:"agents"`
	Redact   *redactDoc           `toml:"redact"`
}

type defaultsDoc struct {
	Timeout   *string   `toml:"timeout"`
	MaxOutput any       `toml:"max_output"`
	MaxStdin  any       `toml:"max_stdin"`
	Env       *[]string `toml:"env"`
	// ApproveWrites makes every op of scope "write" wait for a human's
	// approval unless the op sets approve itself.
	ApproveWrites *bool `toml:"approve_writes"`
}

type opDoc struct {
	Argv        []string           `toml:"argv"`
	Dir         *string            `toml:"dir"`
	Timeout     *string            `toml:"timeout"`
	MaxOutput   any                `toml:"max_output"`
	MaxStdin    any                `toml:"max_stdin"`
	Env         *[]string          `toml:"env"`
	SetEnv      map[string]string  `toml:"set_env"`
	Idempotent  *bool              `toml:"idempotent"`
	Approve     *bool              `toml:"approve"`
	Concurrency *int64             `toml:"concurrency"`
	Description *string            `toml:"description"`
	Scope       *string            `toml:"scope"`
	Risk        *string            `toml:"risk"`
	Stdin       *string            `toml:"stdin"`
	StdinHint   *string            `toml:"stdin_hint"`
	DryRun      *string            `toml:"dry_run"`
	Undo        *string            `toml:"undo"`
	Reconcile   *[]string          `toml:"reconcile"`
	Args        map[string]*argDoc `toml:"args"`
	// Resource limits (safety.go).
	CPU       any    `toml:"cpu"`
	Memory    any    `toml:"memory"`
	OpenFiles *int64 `toml:"open_files"`
	Processes *int64 `toml:"processes"`
}

type argDoc struct {
	Type        *string   `toml:"type"`
	Description *string   `toml:"description"`
	Required    *bool     `toml:"required"`
	Default     any       `toml:"default"`
	Pattern     *string   `toml:"pattern"`
	MaxLen      *int64    `toml:"max_len"`
	AllowDash   *bool     `toml:"allow_dash"`
	AllowAt     *bool     `toml:"allow_at"`
	AllowPlus   *bool     `toml:"allow_plus"`
	Min         *int64    `toml:"min"`
	Max         *int64    `toml:"max"`
	Values      *[]string `toml:"values"`
	Root        *string   `toml:"root"`
	MustExist   *bool     `toml:"must_exist"`
}

type agentDoc struct {
	Ops *[]string `toml:"ops"`
	// Ceilings (safety.go).
	MaxConcurrent       *int64 `toml:"max_concurrent"`
	MaxRunsPerHour      *int64 `toml:"max_runs_per_hour"`
	MaxCPUSecondsPerDay *int64 `toml:"max_cpu_seconds_per_day"`
}

// Known keys per table, for "did you mean" hints on unknown keys.
var (
	topKeys      = []string{"version", "defaults", "ops", "agents", "redact"}
	defaultsKeys = []string{"timeout", "max_output", "max_stdin", "env", "approve_writes"}
	opKeys       = []string{"argv", "dir", "timeout", "max_output", "max_stdin", "env", "set_env", "idempotent", "approve", "concurrency", "description", "scope", "risk", "stdin", "stdin_hint", "dry_run", "undo", "reconcile", "args", "cpu", "memory", "open_files", "processes"}
	argKeys      = []string{"type", "description", "required", "default", "pattern", "max_len", "allow_dash", "allow_at", "allow_plus", "min", "max", "values", "root", "must_exist"}
	agentKeys    = []string{"ops", "max_concurrent", "max_runs_per_hour", "max_cpu_seconds_per_day"}
)

// Load reads and parses the policy file at path. The file must be a regular
// file of at most 1 MiB and, on Unix, neither it nor its directory may be
// writable by group or others: whoever can write the policy, or replace it
// in its directory, decides what agents may run.
func Load(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, &PolicyError{File: path, Msg: "not a regular file", Hint: "point --policy at a plain TOML file"}
	}
	if err := checkWritable(path, fi); err != nil {
		return nil, err
	}
	// A link: the file read is the target's, and whoever can replace the
	// target, or any link on the way to it, decides too (a policy linked
	// from a shared directory, then reloaded live, would give them the
	// host). Each link's directory is checked, then the target's.
	if err := checkLinks(path); err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
		if err := checkWritable(real, fi); err != nil {
			return nil, err
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxPolicySize+1))
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	if len(data) > maxPolicySize {
		return nil, &PolicyError{File: path, Msg: "larger than 1 MiB", Hint: "a policy is a short hand-written file"}
	}
	return Parse(path, data)
}

// checkLinks follows the links from path one by one and checks the
// directory of each (who may write it may point the link elsewhere).
func checkLinks(path string) error {
	for i := 0; i < 40; i++ {
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			return nil
		}
		dir := filepath.Dir(path)
		if di, err := os.Stat(dir); err == nil {
			if err := checkDir(path, dir, di); err != nil {
				return err
			}
		}
		target, err := os.Readlink(path)
		if err != nil {
			return nil
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(dir, target)
		}
		path = target
	}
	return &PolicyError{File: path, Msg: "too many links", Hint: "point the home's policy.toml at the file itself"}
}

// checkWritable refuses a policy file, or a directory holding it, that
// group or others may write. Group counts too: a group is other people as
// far as the policy is concerned, and a shared group is how a second
// account usually gets write access by accident. Windows has no such mode
// bits (ACLs decide), so the check is Unix only.
func checkWritable(path string, fi os.FileInfo) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	if m := fi.Mode().Perm(); m&0o022 != 0 {
		return &PolicyError{File: path, Msg: fmt.Sprintf("writable by group or others (mode %o)", m),
			Hint: "chmod 600 " + path + ": the policy decides what agents may run"}
	}
	if uid, ok := ownerOf(fi); ok && uid != uint32(os.Geteuid()) && uid != 0 {
		return &PolicyError{File: path, Msg: fmt.Sprintf("owned by another user (uid %d)", uid),
			Hint: "the policy decides what agents may run: keep it a file of the user who runs `bridge serve`"}
	}
	dir := filepath.Dir(path)
	di, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("load policy: %w", err)
	}
	return checkDir(path, dir, di)
}

// checkDir refuses a directory holding the policy (or a link to it) that
// another user owns or group or others may write.
func checkDir(path, dir string, di os.FileInfo) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	if uid, ok := ownerOf(di); ok && uid != uint32(os.Geteuid()) && uid != 0 {
		return &PolicyError{File: path, Msg: fmt.Sprintf("its directory %s is owned by another user (uid %d)", dir, uid),
			Hint: "keep the policy in the home: whoever owns the directory can replace the policy"}
	}
	if m := di.Mode().Perm(); m&0o022 != 0 {
		return &PolicyError{File: path, Msg: fmt.Sprintf("its directory %s is writable by group or others (mode %o)", dir, m),
			Hint: "chmod 700 " + dir + ", or keep the policy in the home: whoever can write the directory can replace the policy"}
	}
	return nil
}

// Parse parses a policy from data; name is used in error messages. Errors are
// *PolicyError values (joined when there are several).
func Parse(name string, data []byte) (*Policy, error) {
	sum := sha256.Sum256(data)
	doc, err := decodeAll(name, data)
	if err != nil {
		return nil, err
	}
	b := &builder{file: name, pos: scanPositions(data)}
	p := b.build(doc)
	if len(b.errs) > 0 {
		return nil, b.joined()
	}
	p.Name = name
	p.SHA256 = hex.EncodeToString(sum[:])
	return p, nil
}

// decodeAll decodes the file strictly. The decoder stops at the first value
// of a wrong type; so that one `policy check` shows every such mistake, the
// offending key's lines are blanked and the rest decoded again, up to
// maxReported problems. Only type errors and unknown keys are gathered that
// way: the semantic checks would see a document with keys missing, and their
// complaints would be about our blanking, not the file.
func decodeAll(name string, data []byte) (*fileDoc, error) {
	var errs []error
	work := data
	for {
		dec := toml.NewDecoder(bytes.NewReader(work))
		dec.DisallowUnknownFields()
		var doc fileDoc
		err := dec.Decode(&doc)
		if err == nil {
			if len(errs) > 0 {
				return nil, joinByLine(errs)
			}
			return &doc, nil
		}
		perr := decodeErrors(name, err)
		var de *toml.DecodeError
		if errs = append(errs, perr); len(errs) >= maxReported || !errors.As(err, &de) || !isTypeError(de) {
			return nil, joinByLine(errs)
		}
		next, ok := blankKey(work, de.Key())
		if !ok {
			return nil, joinByLine(errs)
		}
		work = next
	}
}

// joinByLine joins the gathered errors in the file's order: unknown keys
// are only found once every type error has been blanked.
func joinByLine(errs []error) error {
	var flat []error
	for _, e := range errs {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			flat = append(flat, j.Unwrap()...)
		} else {
			flat = append(flat, e)
		}
	}
	line := func(e error) int {
		var pe *PolicyError
		if errors.As(e, &pe) {
			return pe.Line
		}
		return 0
	}
	sort.SliceStable(flat, func(i, j int) bool { return line(flat[i]) < line(flat[j]) })
	if len(flat) > maxReported {
		flat = flat[:maxReported]
	}
	if len(flat) == 1 {
		return flat[0]
	}
	return errors.Join(flat...)
}

func isTypeError(de *toml.DecodeError) bool {
	return typeErrRE().MatchString(strings.TrimPrefix(de.Error(), "toml: "))
}

// blankKey returns data with the key-value expression that holds key turned
// into spaces, line breaks kept so later lines keep their numbers. It
// declines (false) when key is not inside a plain key-value expression, e.g.
// a table header of the wrong type: blanking that would move its keys under
// another table.
func blankKey(data []byte, key []string) ([]byte, bool) {
	var p unstable.Parser
	p.Reset(data)
	var prefix []string
	start := -1
	for p.NextExpression() {
		e := p.Expression()
		if e.Kind != unstable.KeyValue && e.Kind != unstable.Table && e.Kind != unstable.ArrayTable {
			continue
		}
		it := e.Key()
		var parts []string
		off := -1
		for it.Next() {
			n := it.Node()
			if off < 0 {
				off = p.Shape(n.Raw).Start.Offset
			}
			parts = append(parts, string(n.Data))
		}
		lineStart := bytes.LastIndexByte(data[:max(off, 0)], '\n') + 1
		if start >= 0 {
			return blank(data, start, lineStart), true
		}
		if e.Kind != unstable.KeyValue {
			prefix = parts
			if hasPrefix(key, parts) && len(key) == len(parts) {
				return nil, false
			}
			continue
		}
		if full := append(append([]string{}, prefix...), parts...); hasPrefix(key, full) {
			start = lineStart
		}
	}
	if start >= 0 && p.Error() == nil {
		return blank(data, start, len(data)), true
	}
	return nil, false
}

func hasPrefix(key, prefix []string) bool {
	return len(prefix) > 0 && len(key) >= len(prefix) && slices.Equal(key[:len(prefix)], prefix)
}

func blank(data []byte, from, to int) []byte {
	out := bytes.Clone(data)
	for i := from; i < to; i++ {
		if out[i] != '\n' && out[i] != '\r' {
			out[i] = ' '
		}
	}
	return out
}

// decodeErrors turns go-toml's errors into PolicyErrors with file and line.
func decodeErrors(file string, err error) error {
	var se *toml.StrictMissingError
	if errors.As(err, &se) {
		var errs []error
		for i := range se.Errors {
			if i == maxReported {
				break
			}
			de := &se.Errors[i]
			line, _ := de.Position()
			key := []string(de.Key())
			errs = append(errs, &PolicyError{File: file, Line: line, Key: formatKey(key), Msg: "unknown key", Hint: unknownKeyHint(key)})
		}
		return errors.Join(errs...)
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, col := de.Position()
		key := []string(de.Key())
		msg := strings.TrimPrefix(de.Error(), "toml: ")
		if m := typeErrRE().FindStringSubmatch(msg); m != nil {
			return &PolicyError{File: file, Line: line, Key: formatKey(key),
				Msg:  fmt.Sprintf("wrong type: got %s, want %s", tomlArticle(m[1]), goTypeName(m[2])),
				Hint: typeHint(key)}
		}
		hint := fmt.Sprintf("check the TOML syntax at column %d", col)
		if strings.Contains(msg, "array table") {
			hint = "write [ops.NAME] tables; [[...]] arrays of tables are not part of the schema"
		}
		return &PolicyError{File: file, Line: line, Key: formatKey(key), Msg: msg, Hint: hint}
	}
	return &PolicyError{File: file, Msg: err.Error()}
}

var typeErrRE = lazyRegexp(`^cannot decode TOML (.+?) into (?:.* of type )?(\S+)$`)

func tomlArticle(kind string) string {
	if kind != "" && strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an " + kind
	}
	return "a " + kind
}

// goTypeName names the TOML type a Go field type wants, in user terms.
func goTypeName(t string) string {
	t = strings.TrimLeft(t, "*")
	switch {
	case t == "string":
		return "a string"
	case t == "[]string":
		return "an array of strings"
	case t == "int64":
		return "an integer"
	case t == "bool":
		return "a boolean (true or false)"
	case strings.HasPrefix(t, "map[") || strings.HasPrefix(t, "policy."):
		return "a table"
	}
	return t
}

// typeHint says what a key should look like, by the key's last part.
func typeHint(key []string) string {
	if len(key) == 0 {
		return ""
	}
	switch key[len(key)-1] {
	case "timeout":
		return `a Go duration string such as "10m" or "1h30m"`
	case "argv", "reconcile":
		return `an array of strings such as ["go", "test", "{pkg}"]`
	case "env":
		return `an array of variable names such as ["PATH", "HOME"]`
	case "set_env":
		return `a table of NAME = "value" strings`
	case "ops":
		if len(key) == 1 {
			return "define each op as a table [ops.NAME]"
		}
		return `an array of op names such as ["test", "build"]`
	case "agents":
		return "define each agent as a table [agents.NAME]"
	case "values":
		return `an array of strings such as ["debug", "release"]`
	case "concurrency", "max_len", "min", "max", "version", "open_files", "processes", "max_concurrent", "max_runs_per_hour", "max_cpu_seconds_per_day":
		return "a whole number without quotes"
	case "idempotent", "approve", "required", "must_exist", "allow_dash", "allow_at", "allow_plus", "enabled":
		return "true or false without quotes"
	case "dir", "root":
		return `an absolute path or "~/..." in quotes`
	case "description", "pattern", "type", "scope", "risk", "stdin", "stdin_hint", "dry_run", "undo":
		return "a quoted string"
	case "args":
		return "define each argument as a table [ops.NAME.args.ARG]"
	case "defaults":
		return "a table [defaults]"
	}
	if len(key) == 2 && key[0] == "ops" || len(key) == 2 && key[0] == "agents" || len(key) == 4 && key[2] == "args" {
		return "this must be a table: [" + formatKey(key) + "]"
	}
	return "see the schema in the package documentation"
}

// unknownKeyHint lists the keys valid where the unknown one was found and
// suggests the closest.
func unknownKeyHint(key []string) string {
	// The unknown part is the first one below a table the schema defines
	// (ops.t.foo.bar is unknown because of foo).
	var valid []string
	var last string
	switch {
	case len(key) >= 5 && key[0] == "ops" && key[2] == "args":
		valid, last = argKeys, key[4]
	case len(key) >= 3 && key[0] == "ops":
		valid, last = opKeys, key[2]
	case len(key) >= 3 && key[0] == "agents":
		valid, last = agentKeys, key[2]
	case len(key) >= 2 && key[0] == "redact":
		valid, last = redactKeys, key[1]
	case len(key) >= 2 && key[0] == "defaults":
		valid, last = defaultsKeys, key[1]
	case len(key) >= 1:
		valid, last = topKeys, key[0]
	default:
		return "not part of the policy schema"
	}
	if s := closest(last, valid); s != "" {
		return fmt.Sprintf("did you mean %q?", s)
	}
	return "valid keys here: " + strings.Join(valid, ", ")
}

var bareKeyRE = lazyRegexp(`^[A-Za-z0-9_-]+$`)

// formatKey renders a key path the way it would be written in TOML, quoting
// parts that are not bare keys (op names may contain dots).
func formatKey(parts []string) string {
	out := make([]string, len(parts))
	for i, p := range parts {
		if bareKeyRE().MatchString(p) {
			out[i] = p
		} else {
			out[i] = strconv.Quote(p)
		}
	}
	return strings.Join(out, ".")
}

// positions maps a key path (parts joined by NUL, which no TOML key written in
// a policy can usefully contain) to the line where it is defined. Tables map to
// their header line; implicit parent tables to the first line that creates them.
type positions map[string]int

func pathKey(parts ...string) string { return strings.Join(parts, "\x00") }

// line returns the line of the longest prefix of parts that has one.
func (ps positions) line(parts ...string) int {
	for n := len(parts); n > 0; n-- {
		if l, ok := ps[pathKey(parts[:n]...)]; ok {
			return l
		}
	}
	return 0
}

// scanPositions walks go-toml's AST to learn where every key and table is.
// It runs only after the decoder accepted the document, so a parse failure here
// is unexpected; whatever was gathered up to it is still used.
func scanPositions(data []byte) positions {
	ps := positions{}
	var p unstable.Parser
	p.Reset(data)
	var prefix []string
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			parts, line := keyOf(&p, e.Key())
			prefix = parts
			ps.record(prefix, line)
		case unstable.KeyValue:
			ps.recordKV(&p, prefix, e)
		}
	}
	return ps
}

func (ps positions) record(parts []string, line int) {
	for n := 1; n <= len(parts); n++ {
		k := pathKey(parts[:n]...)
		if _, ok := ps[k]; !ok {
			ps[k] = line
		}
	}
}

func (ps positions) recordKV(p *unstable.Parser, prefix []string, kv *unstable.Node) {
	rel, line := keyOf(p, kv.Key())
	full := append(append([]string{}, prefix...), rel...)
	ps.record(full, line)
	v := kv.Value()
	if v.Kind == unstable.InlineTable {
		it := v.Children()
		for it.Next() {
			if c := it.Node(); c.Kind == unstable.KeyValue {
				ps.recordKV(p, full, c)
			}
		}
	}
}

func keyOf(p *unstable.Parser, it unstable.Iterator) ([]string, int) {
	var parts []string
	line := 0
	for it.Next() {
		n := it.Node()
		if line == 0 {
			line = p.Shape(n.Raw).Start.Line
		}
		parts = append(parts, string(n.Data))
	}
	return parts, line
}

// builder accumulates semantic errors while turning a fileDoc into a Policy.
type builder struct {
	file string
	pos  positions
	errs []*PolicyError
	home string
	herr error
	hset bool
}

// errAt records a problem at the key path parts.
func (b *builder) errAt(parts []string, hint, format string, args ...any) {
	b.errs = append(b.errs, &PolicyError{
		File: b.file,
		Line: b.pos.line(parts...),
		Key:  formatKey(parts),
		Msg:  fmt.Sprintf(format, args...),
		Hint: hint,
	})
}

func (b *builder) joined() error {
	sort.SliceStable(b.errs, func(i, j int) bool { return b.errs[i].Line < b.errs[j].Line })
	if len(b.errs) > maxReported {
		b.errs = b.errs[:maxReported]
	}
	errs := make([]error, len(b.errs))
	for i, e := range b.errs {
		errs[i] = e
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}
