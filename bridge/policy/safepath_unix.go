//go:build unix

package policy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/syncbridge/bridge/bridge/internal/safepath"
)

// UnsafePathDir says why a program must not be looked up in dir, or "":
// another user could put one there or swap the directory (see
// unsafeChain), and a program the policy names by its bare name would be
// theirs.
func UnsafePathDir(dir string) string {
	if !filepath.IsAbs(dir) {
		return "not absolute"
	}
	// Every directory on the way to it is one the lookup passes through
	// (a sticky one, as /tmp, is fine there); the entry itself holds the
	// programs, checked last. (walkChain would take the entry's parent for
	// the program's directory: a closed directory of yours under /tmp was
	// refused.)
	real, exists, why := safepath.WalkOwned(dir)
	if why != "" {
		return why
	}
	if !exists {
		return "missing"
	}
	fi, err := os.Stat(real)
	switch {
	case err != nil:
		return "missing"
	case !fi.IsDir():
		return "not a directory"
	}
	return safepath.UnsafeDir(real, true) // its own directory: what is put in it is run
}

// unsafeChain says why another user could change what path names, or "".
// Everything the kernel traverses to reach it counts, as ssh's StrictModes
// checks a key file's directories, and every link met on the way, at any
// depth: each directory a name is looked up in must be owned by root or
// this user and not writable by group or others (a sticky one, as /tmp,
// only above the program's own directory: it protects what is in it), and
// each link must be owned by root or this user. Otherwise whoever may
// write one of them can rename or re-point what is below and put their own
// in its place, between the lookup and the exec too (the red teams of
// issue 26).
func unsafeChain(path string) string {
	_, why := safepath.Chain(path, 0)
	return why
}

// unsafeProgram says why the program file fi must not run, or "": another
// user could change it.
func unsafeProgram(fi os.FileInfo) string {
	if fi.Mode().Perm()&0o022 != 0 {
		return "writable by group or others"
	}
	if !safepath.Owned(fi) {
		return "owned by another user"
	}
	return ""
}

// unsafeInterpreter says why the interpreter a script at path names (its
// "#!" line, through `env NAME` in pathEnv, at any depth the kernel
// follows) must not run, or "": another user could have put or changed it.
func unsafeInterpreter(path string, pathEnv func() string, depth int) string {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "" // the exec will say
	} else if errors.Is(err, fs.ErrPermission) && safepath.RootsOwn(path) {
		// A program root made run-only (RHEL's sudo, ---s--x--x): whatever
		// its first line says, root wrote it and only root can change it,
		// like any other byte of it (its directories were checked).
		return ""
	} else if err != nil {
		// The kernel reads the line of a script this user may run but
		// not read (mode 0111), and of any other: fail closed (red team
		// of 5a0daa3).
		return fmt.Sprintf("its interpreter line cannot be read to check it (%v)", err)
	}
	head := make([]byte, 256)
	n, err := io.ReadFull(f, head)
	f.Close()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Sprintf("its interpreter line cannot be read to check it (%v)", err)
	}
	line, _, _ := strings.Cut(string(head[:n]), "\n")
	rest, ok := strings.CutPrefix(line, "#!")
	if !ok {
		return ""
	}
	if depth > 4 {
		return "interpreters nested too deep"
	}
	// The kernel splits on spaces and tabs, but env -S on every white
	// space (\v, \f, \r too): a line with any control character is read
	// one way here and another there (red team of 5a0daa3: PATH= hidden
	// behind a \v). Refused, whatever the interpreter.
	for _, r := range rest {
		if r != '\t' && (r < ' ' || r == 0x7f) {
			return fmt.Sprintf("its interpreter line holds a control character (%q; a \\r is a Windows line end): write it with spaces only", rest)
		}
	}
	fields := strings.FieldsFunc(rest, func(r rune) bool { return r == ' ' || r == '\t' })
	if len(fields) == 0 {
		return ""
	}
	interp, args := fields[0], fields[1:]
	if why := checkInterp(interp, pathEnv, depth); why != "" {
		return why
	}
	if filepath.Base(interp) == "env" {
		// Fail closed: only `env PROGRAM` (the kernel hands env the rest
		// of the line as one argument) or `env -S [-i] [NAME=VALUE...]
		// PROGRAM [ARG...]` in plain words: no PATH= (it would choose
		// where PROGRAM is found), no other option (-C changes the
		// directory, -P the path, --split-string and a glued -S hide the
		// rest from this reading), and no quote, backslash, $ or # (env
		// -S unquotes and expands them: "PATH=..." or P${X}ATH=...).
		if len(args) > 1 && args[0] != "-S" {
			return fmt.Sprintf("its interpreter line passes env more than a program without -S (%q): write `#!/usr/bin/env PROGRAM` or `#!/usr/bin/env -S PROGRAM ARGS`", rest)
		}
		if strings.ContainsAny(rest, "\"'\\$#") {
			return fmt.Sprintf("its interpreter line holds a quote, backslash, $ or # that env -S would read as syntax (%q): write plain words", rest)
		}
		cleared := false
		for len(args) > 0 && (args[0] == "-S" || args[0] == "-i") {
			cleared = cleared || args[0] == "-i"
			args = args[1:]
		}
		for len(args) > 0 && strings.Contains(args[0], "=") && !strings.HasPrefix(args[0], "-") {
			name, _, _ := strings.Cut(args[0], "=")
			if name == "PATH" {
				return fmt.Sprintf("its interpreter line sets PATH for env (%q): bridge cannot check where that finds a program", rest)
			}
			if strings.HasPrefix(name, "LD_") || strings.HasPrefix(name, "DYLD_") || strings.HasPrefix(name, "BASH_FUNC_") || dangerousEnv[name] {
				return fmt.Sprintf("its interpreter line sets %s for env, which lets a value run code before the program starts (%q)", name, rest)
			}
			args = args[1:]
		}
		if cleared {
			pathEnv = func() string { return defaultOpPATH } // env -i: no PATH, the C library's default
		}
		if len(args) > 0 && strings.Contains(args[0], "/") {
			return fmt.Sprintf("its interpreter line has env run %q, a path env takes from the op's directory or as it is: name the program alone, or as the interpreter", args[0])
		}
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			return fmt.Sprintf("its interpreter line uses env in a form bridge does not check (%q): write `#!/usr/bin/env PROGRAM` or `#!/usr/bin/env -S PROGRAM ARGS`", rest)
		}
		// env looks the program up in the op's own PATH.
		found, _, err := lookPathDepth(args[0], pathEnv, pathEnv, depth+1)
		if err != nil {
			return fmt.Sprintf("its interpreter %s (through env): %v", args[0], err)
		}
		if why := unsafeInterpreter(found, pathEnv, depth+1); why != "" {
			return why
		}
		args = args[1:]
	}
	// The interpreter's arguments: options, or files it reads as code,
	// which must follow the program's rule.
	for _, a := range args {
		if strings.HasPrefix(a, "-") && strings.Contains(a, "/") {
			// An option with a path in it (perl -I/x, ruby -r/x.rb): the
			// path is code the interpreter loads.
			// Only `-X/abs` and `--name=/abs` name an absolute path;
			// anything else before the slash (-Ilib/x, -I./x) is a
			// relative one, read from the op's directory.
			i := strings.IndexByte(a, '/')
			if !optionBeforePath().MatchString(a[:i]) {
				return fmt.Sprintf("its interpreter line names a relative path in %q: it would be read from the op's directory", a)
			}
			a = a[i:]
		}
		switch {
		case strings.HasPrefix(a, "-"):
		case filepath.IsAbs(a):
			if why := unsafeChain(a); why != "" {
				return fmt.Sprintf("its interpreter line names %s: %s", a, why)
			}
			if fi, err := os.Stat(a); err == nil {
				if why := unsafeProgram(fi); why != "" {
					return fmt.Sprintf("its interpreter line names %s, which is %s", a, why)
				}
			}
		default:
			return fmt.Sprintf("its interpreter line names %q, neither an option nor an absolute path: it would be read from the op's directory", a)
		}
	}
	return ""
}

// optionBeforePath is what may come before the absolute path in an
// interpreter's option: one letter (-I/x) or a long name and = (--x=/y).
var optionBeforePath = lazyRegexp(`^(-[A-Za-z]|--[A-Za-z][A-Za-z-]*=)$`)

// checkInterp checks one interpreter named by an absolute path.
func checkInterp(interp string, pathEnv func() string, depth int) string {
	if !filepath.IsAbs(interp) {
		return fmt.Sprintf("its interpreter %q is not an absolute path", interp)
	}
	if _, err := os.Lstat(interp); errors.Is(err, fs.ErrNotExist) {
		// Missing: the exec fails (the op's start fails, as it always
		// did), unless someone else could make it meanwhile.
		if real, exists, why := safepath.WalkOwned(interp); why == "" && !exists && madeOnlyByUs(real) {
			return ""
		}
		return fmt.Sprintf("its interpreter %s does not exist, and someone else could make it there", interp)
	}
	if why := unsafeChain(interp); why != "" {
		return fmt.Sprintf("its interpreter %s: %s", interp, why)
	}
	if fi, err := os.Stat(interp); err == nil {
		if why := unsafeProgram(fi); why != "" {
			return fmt.Sprintf("its interpreter %s is %s", interp, why)
		}
	}
	return unsafeInterpreter(interp, pathEnv, depth+1)
}
