//go:build unix

package policy

// What the red team of the PATH rule (after 4a8f845) found; each test
// failed then and guards the component-by-component walk (walkChain).

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/syncbridge/bridge/bridge/internal/safepath"
)

func rtMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// rtSetup: base/safe/bin/tool (ours, closed) and base/open (0777, not
// sticky: anyone may rename or replace what is in it).
func rtSetup(t *testing.T) (base, bin, open string) {
	base = t.TempDir()
	rtMust(t, os.Chmod(base, 0o755))
	bin = filepath.Join(base, "safe", "bin")
	rtMust(t, os.MkdirAll(bin, 0o755))
	rtMust(t, os.WriteFile(filepath.Join(bin, "tool"), []byte("#!/bin/sh\n"), 0o755))
	open = filepath.Join(base, "open")
	rtMust(t, os.Mkdir(open, 0o755))
	rtMust(t, os.Chmod(open, 0o777))
	return
}

// An absolute program that is a link to a link: the middle link lives in a
// directory anyone may write, so anyone may re-point it (to their own
// program) after the lookup. Neither the path as written nor the final
// resolved path passes through that directory, so it is never checked.
func TestHostileLinkToLinkThroughOpenDir(t *testing.T) {
	base, bin, open := rtSetup(t)
	hop := filepath.Join(open, "hop")
	rtMust(t, os.Symlink(filepath.Join(bin, "tool"), hop))
	entry := filepath.Join(base, "safe", "entry")
	rtMust(t, os.Mkdir(entry, 0o755))
	prog := filepath.Join(entry, "tool")
	rtMust(t, os.Symlink(hop, prog))
	if p, err := lookPath(prog, func() string { return "" }); err == nil {
		t.Errorf("absolute program %s accepted (%s), though its link goes through %s, which others may write", p, prog, hop)
	}
	if p, err := lookPath("tool", func() string { return entry }); err == nil {
		t.Errorf("bare name accepted as %s, though its link goes through %s, which others may write", p, hop)
	}
}

// A PATH entry that is a link to a link, the middle one in an open
// directory: the directory link is followed by os.Stat, so its own place is
// never looked at.
func TestHostilePathEntryLinkThroughOpenDir(t *testing.T) {
	base, bin, open := rtSetup(t)
	hop := filepath.Join(open, "hop")
	rtMust(t, os.Symlink(bin, hop))
	entry := filepath.Join(base, "safe", "binlink")
	rtMust(t, os.Symlink(hop, entry))
	if p, err := lookPath("tool", func() string { return entry }); err == nil {
		t.Errorf("program accepted as %s, though PATH entry %s resolves through %s, which others may write", p, entry, hop)
	}
}

// A link in the middle of the path, in a sticky world-writable directory,
// owned by another user: the sticky bit protects it from us, not from its
// owner, who may replace it at will. (Linux follows it unless
// fs.protected_symlinks=1; macOS and the BSDs always follow it.)
func TestHostileOthersLinkInStickyDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a link another user owns")
	}
	base, bin, _ := rtSetup(t)
	sticky := filepath.Join(base, "sticky")
	rtMust(t, os.Mkdir(sticky, 0o755))
	rtMust(t, os.Chmod(sticky, 0o777|os.ModeSticky))
	link := filepath.Join(sticky, "tools")
	rtMust(t, os.Symlink(bin, link))
	rtMust(t, os.Lchown(link, 65534, 65534)) // nobody's link
	if p, err := lookPath("tool", func() string { return link }); err == nil {
		t.Errorf("program accepted as %s via %s, a link another user owns (and may replace) in a sticky directory", p, link)
	}
	if p, err := lookPath(filepath.Join(link, "tool"), func() string { return "" }); err == nil {
		t.Errorf("absolute program accepted as %s via another user's link", p)
	}
}

// UnsafePathDir (serve's SafePath) on a link to a directory others may
// write: the directory it resolves to is never checked itself.
func TestHostileUnsafePathDirLinkToOpenDir(t *testing.T) {
	base, _, open := rtSetup(t)
	entry := filepath.Join(base, "safe", "openlink")
	rtMust(t, os.Symlink(open, entry))
	if why := UnsafePathDir(entry); why == "" {
		t.Errorf("UnsafePathDir(%s -> %s, mode 0777) = \"\"; want it refused", entry, open)
	}
}

// Legitimate system layouts must pass.
func TestHostileSystemLayoutsPass(t *testing.T) {
	for _, prog := range []string{"/bin/sh", "/usr/bin/env"} {
		if _, err := os.Stat(prog); err != nil {
			continue
		}
		if p, err := lookPath(prog, func() string { return "" }); err != nil {
			t.Errorf("%s: %v", prog, err)
		} else if p != prog {
			t.Errorf("%s -> %s", prog, p)
		}
	}
	for _, path := range []string{"/bin", "/usr/bin/", "//usr//bin", "/usr/local/../bin"} {
		if _, err := lookPath("sh", func() string { return path }); err != nil {
			t.Errorf("PATH %s: %v", path, err)
		}
	}
}

// A PATH entry under /proc (/proc/self/cwd is "." written as an absolute
// path): the daemon would resolve it to its own directory and check that
// program, and the op, in its own directory, would run another (the red
// team of 8612227).
func TestHostilePathEntryUnderProc(t *testing.T) {
	if _, err := os.Stat("/proc/self/cwd"); err != nil {
		t.Skip("no /proc")
	}
	_, bin, _ := rtSetup(t)
	t.Chdir(bin)
	for _, entry := range []string{"/proc/self/cwd", "/dev/fd/../../proc/self/cwd"} {
		if p, err := lookPath("tool", func() string { return entry }); err == nil {
			t.Errorf("PATH entry %s: program taken as %s", entry, p)
		}
		if why := UnsafePathDir(entry); why == "" {
			t.Errorf("PATH entry %s is called safe", entry)
		}
	}
}

// What the op runs by name follows its program's rule (the red team of
// 8612227): the PATH in the op's environment loses the entries its own
// program would not be taken from (another user's, relative, empty), and a
// script whose "#!" interpreter (named, or found by env) lies where others
// could put or change it is refused.
func TestHostileOpPathAndInterpreter(t *testing.T) {
	base, bin, open := rtSetup(t)
	rtMust(t, os.WriteFile(filepath.Join(open, "interp"), []byte("#!/bin/sh\n"), 0o755))
	rtMust(t, os.WriteFile(filepath.Join(bin, "named"), []byte("#!"+filepath.Join(open, "interp")+"\n"), 0o755))
	rtMust(t, os.WriteFile(filepath.Join(bin, "viaenv"), []byte("#!/usr/bin/env interp\n"), 0o755))
	rtMust(t, os.WriteFile(filepath.Join(bin, "fine"), []byte("#!/bin/sh -e\n"), 0o755))
	pathEnv := open + ":" + bin + "::relative:/usr/bin:/bin"
	kept, dropped := SafePATH(pathEnv)
	if kept != bin+":/usr/bin:/bin" || len(dropped) != 3 {
		t.Errorf("SafePATH(%q) = %q, dropped %q", pathEnv, kept, dropped)
	}
	for _, prog := range []string{"named", "viaenv"} {
		if p, err := lookPath(filepath.Join(bin, prog), func() string { return open + ":" + bin }); err == nil {
			t.Errorf("%s accepted as %s, though its interpreter lies in %s", prog, p, open)
		}
	}
	if _, err := lookPath(filepath.Join(bin, "fine"), func() string { return "" }); err != nil {
		t.Errorf("a script run by /bin/sh: %v", err)
	}
	p, err := Parse("p.toml", []byte("[ops.a]\nargv = [\"fine\"]\nset_env = { PATH = \""+pathEnv+"\" }\n[agents.ag]\nops = [\"a\"]\n"))
	rtMust(t, err)
	inv, err := p.Render("ag", "a", nil, RenderContext{})
	rtMust(t, err)
	if !slices.Contains(inv.Env, "PATH="+bin+":/usr/bin:/bin") {
		t.Errorf("the op's environment: %q", inv.Env)
	}
	// Nothing left: no PATH at all, never an empty one (a shell reads
	// that as its working directory: the red team of 5da3cff).
	p, err = Parse("p.toml", []byte("[ops.a]\nargv = [\""+filepath.Join(bin, "fine")+"\"]\nset_env = { PATH = \""+open+"\" }\n[agents.ag]\nops = [\"a\"]\n"))
	rtMust(t, err)
	inv, err = p.Render("ag", "a", nil, RenderContext{})
	rtMust(t, err)
	if len(inv.Env) != 0 {
		t.Errorf("an op whose PATH loses every entry: %q", inv.Env)
	}
	// A directory not made yet, where only this user could make it, stays.
	if kept, _ := SafePATH(filepath.Join(bin, "later")); kept != filepath.Join(bin, "later") {
		t.Errorf("a missing directory in a closed one: %q", kept)
	}
	if kept, _ := SafePATH(filepath.Join(open, "later")); kept != "" {
		t.Errorf("a missing directory in an open one: %q", kept)
	}
	_ = base
}

// env on a "#!" line is read fail-closed, and the interpreter's arguments
// follow the program's rule (the red team of 5da3cff: five forms ran a
// program from a directory anyone may write).
func TestHostileInterpreterLineForms(t *testing.T) {
	_, bin, open := rtSetup(t)
	rtMust(t, os.WriteFile(filepath.Join(open, "evil"), []byte("#!/bin/sh\n"), 0o755))
	rtMust(t, os.WriteFile(filepath.Join(bin, "tool2"), []byte("#!/bin/sh\n"), 0o755))
	refused := []string{
		"#!/usr/bin/env -S \"PATH=" + open + "\" sh\n",
		"#!/usr/bin/env -S 'PATH=" + open + "' sh\n",
		"#!/usr/bin/env -S PA''TH=" + open + " sh\n",
		"#!/usr/bin/env -S P${UNSET}ATH=" + open + " sh\n",
		"#!/usr/bin/env sh -e\n",
		"#!/usr/bin/perl -I" + open + "\n",
		"#!/usr/bin/perl -I./lib\n",
		"#!/usr/bin/env -S" + open + "/evil\n",
		"#!/usr/bin/env --split-string=" + open + "/evil\n",
		"#!/usr/bin/env -S PATH=" + open + " sh\n",
		"#!/usr/bin/env -S -C" + open + " ./tool\n",
		"#!/bin/sh " + open + "/evil\n",
		"#!/bin/sh evil\n",
	}
	accepted := []string{
		"#!/usr/bin/env sh\n",
		"#!/usr/bin/env -S sh -e\n",
		"#!/bin/sh -I" + bin + "\n",
		"#!/usr/bin/env -S LANG=C sh -e\n",
		"#!/bin/sh -e\n",
		"#!/bin/sh " + filepath.Join(bin, "tool2") + "\n",
	}
	for i, line := range append(refused, accepted...) {
		prog := filepath.Join(bin, "script"+string(rune('a'+i)))
		rtMust(t, os.WriteFile(prog, []byte(line), 0o755))
		_, err := lookPath(prog, func() string { return "/usr/bin:/bin" })
		if want := i < len(refused); want != (err != nil) {
			t.Errorf("%q: refused %v (%v), want refused %v", line, err != nil, err, want)
		}
	}
}

// A closed directory of this user's directly under a sticky one (/tmp) is
// a fine PATH entry, as it is on the way to a program (a new user's trial
// found it dropped as "writable by group or others").
func TestPathEntryUnderAStickyDirectory(t *testing.T) {
	base := t.TempDir()
	sticky := filepath.Join(base, "sticky")
	rtMust(t, os.Mkdir(sticky, 0o755))
	rtMust(t, os.Chmod(sticky, 0o777|os.ModeSticky))
	mine := filepath.Join(sticky, "mine")
	rtMust(t, os.Mkdir(mine, 0o755))
	if why := UnsafePathDir(mine); why != "" {
		t.Errorf("%s: %s", mine, why)
	}
	if kept, dropped := SafePATH(mine); kept != mine {
		t.Errorf("SafePATH dropped %s: %q", mine, dropped)
	}
	if why := UnsafePathDir(sticky); why == "" {
		t.Error("the sticky, world-writable directory itself is called safe")
	}
}

// A PATH entry not made yet, whose first missing name would be made in a
// sticky directory (/tmp): anyone may make it there, and put a program in
// it after the check (the red team of 887f99e). Dropped.
func TestMissingPathEntryInAStickyDirectory(t *testing.T) {
	base := t.TempDir()
	sticky := filepath.Join(base, "sticky")
	rtMust(t, os.Mkdir(sticky, 0o755))
	rtMust(t, os.Chmod(sticky, 0o777|os.ModeSticky))
	if kept, _ := SafePATH(filepath.Join(sticky, "tools") + ":/usr/bin"); kept != "/usr/bin" {
		t.Errorf("a missing entry in a sticky directory is kept: %q", kept)
	}
	mine := filepath.Join(sticky, "mine")
	rtMust(t, os.Mkdir(mine, 0o755))
	if kept, _ := SafePATH(filepath.Join(mine, "tools")); kept != filepath.Join(mine, "tools") {
		t.Errorf("a missing entry in a closed directory of ours (under a sticky one) is dropped: %q", kept)
	}
}

// PATH entries with . or .. are dropped: the kernel resolves them through
// what the names before them are when the op runs (a missing name someone
// makes later, as a link into their directory: the red team of e587665);
// env may not run a program named with a slash, nor set a variable that
// runs code first.
func TestHostilePathDotDotAndEnvForms(t *testing.T) {
	_, bin, _ := rtSetup(t)
	for _, e := range []string{bin + "/x/../..", bin + "/./", filepath.Dir(bin) + "/missing/../bin"} {
		if kept, _ := SafePATH(e); kept != "" {
			t.Errorf("SafePATH(%q) kept %q", e, kept)
		}
	}
	for i, line := range []string{"#!/usr/bin/env ./sh\n", "#!/usr/bin/env -S sub/sh\n", "#!/usr/bin/env -S LD_PRELOAD=/x.so sh\n", "#!/usr/bin/env -S BASH_ENV=/x sh\n"} {
		prog := filepath.Join(bin, "envform"+string(rune('a'+i)))
		rtMust(t, os.WriteFile(prog, []byte(line), 0o755))
		if _, err := lookPath(prog, func() string { return "/usr/bin:/bin" }); err == nil {
			t.Errorf("%q accepted", line)
		}
	}
}

// A script whose interpreter does not exist fails to start, as it always
// did, when no one else could make the interpreter there; where another
// user could (an open directory), it is refused before.
func TestMissingInterpreter(t *testing.T) {
	_, bin, open := rtSetup(t)
	for line, refused := range map[string]bool{
		"#!/nonexistent/interpreter\n":       false,
		"#!" + open + "/later/interpreter\n": true,
		"#!" + bin + "/later\n":              false,
	} {
		prog := filepath.Join(bin, "s")
		rtMust(t, os.WriteFile(prog, []byte(line), 0o755))
		if _, err := lookPath(prog, func() string { return "" }); (err != nil) != refused {
			t.Errorf("%q: %v, want refused %v", line, err, refused)
		}
	}
}

// A missing interpreter path with ".." after its first missing name is
// refused: the kernel resolves it through whatever that name becomes (the
// red team of 7a39ede ran another user's program so, as root).
func TestMissingInterpreterWithDotDot(t *testing.T) {
	base, bin, _ := rtSetup(t)
	sticky := filepath.Join(base, "sticky")
	rtMust(t, os.Mkdir(sticky, 0o755))
	rtMust(t, os.Chmod(sticky, 0o777|os.ModeSticky))
	prog := filepath.Join(bin, "s")
	for _, interp := range []string{sticky + "/nx/../../safe/bin/later", "/nonexistent-rt/../usr/bin/later"} {
		rtMust(t, os.WriteFile(prog, []byte("#!"+interp+"\n"), 0o755))
		if _, err := lookPath(prog, func() string { return "" }); err == nil {
			t.Errorf("#!%s accepted", interp)
		}
	}
	if _, exists, why := safepath.WalkOwned(sticky + "/nx/../mine"); exists || why == "" {
		t.Errorf("WalkOwned through a missing name and ..: exists %v, %q", exists, why)
	}
}

// What the red team of 5a0daa3 found.

// env -S splits on every white space (\v, \f, \r too), the kernel only on
// spaces and tabs: a PATH= hidden behind a \v ran another user's python.
// Any control character in an interpreter line is refused.
func TestHostileInterpreterLineControlCharacters(t *testing.T) {
	_, bin, open := rtSetup(t)
	for i, sep := range []string{"\v", "\f", "\r", "\x1b"} {
		line := "#!/usr/bin/env -S X=1" + sep + "PATH=" + open + " sh\n"
		prog := filepath.Join(bin, "vt"+string(rune('a'+i)))
		rtMust(t, os.WriteFile(prog, []byte(line), 0o755))
		_, err := lookPath(prog, func() string { return "/usr/bin:/bin" })
		if err == nil || !strings.Contains(err.Error(), "control character") {
			t.Errorf("%q: %v, want refused for a control character", line, err)
		}
	}
}

// ".." out of an existing directory that another user owns (made in a
// sticky /tmp) is refused: they may rename it and put a link to their own
// tree in its place, and the kernel then goes up from there.
func TestHostileDotDotOutOfAnothersDirectory(t *testing.T) {
	base, bin, _ := rtSetup(t)
	sticky := filepath.Join(base, "sticky")
	rtMust(t, os.Mkdir(sticky, 0o755))
	rtMust(t, os.Chmod(sticky, 0o777|os.ModeSticky))
	nx := filepath.Join(sticky, "nx")
	rtMust(t, os.Mkdir(nx, 0o755))
	rtMust(t, os.Chown(nx, 65534, 65534)) // nobody's
	through := sticky + "/nx/../../safe/bin/tool"
	prog := filepath.Join(bin, "s")
	for _, interp := range []string{sticky + "/nx/../../safe/bin/later", through} {
		rtMust(t, os.WriteFile(prog, []byte("#!"+interp+"\n"), 0o755))
		if _, err := lookPath(prog, func() string { return "" }); err == nil {
			t.Errorf("#!%s accepted", interp)
		}
	}
	if _, err := lookPath(through, func() string { return "" }); err == nil {
		t.Errorf("program %s accepted", through)
	}
	if _, _, why := safepath.WalkOwned(sticky + "/nx/../mine"); why == "" {
		t.Errorf("WalkOwned out of nobody's directory by ..: accepted")
	}
	// The same through a directory of this user's: nobody else may rename
	// it in the sticky directory, so it passes.
	mine := filepath.Join(sticky, "mine")
	rtMust(t, os.Mkdir(mine, 0o755))
	if _, err := lookPath(sticky+"/mine/../../safe/bin/tool", func() string { return "" }); err != nil {
		t.Errorf("out of this user's own directory by ..: %v", err)
	}
}

// A script that names itself through env (#!/usr/bin/env selfy) is refused
// as nested too deep; it overflowed the stack (and would end serve).
func TestInterpreterThatNamesItselfThroughEnv(t *testing.T) {
	_, bin, _ := rtSetup(t)
	rtMust(t, os.WriteFile(filepath.Join(bin, "selfy"), []byte("#!/usr/bin/env selfy\n"), 0o755))
	_, err := lookPath(filepath.Join(bin, "selfy"), func() string { return bin })
	if err == nil || !strings.Contains(err.Error(), "nested too deep") {
		t.Fatalf("self-naming script: %v", err)
	}
}

// An option with a path is an absolute path only as -X/abs or --name=/abs:
// -Ilib/usr/lib is lib/usr/lib, in the op's directory.
func TestInterpreterOptionPaths(t *testing.T) {
	_, bin, _ := rtSetup(t)
	for line, refused := range map[string]bool{
		"#!/bin/sh -Ilib/usr/lib\n":     true,
		"#!/bin/sh -I./lib\n":           true,
		"#!/bin/sh -I/usr/lib\n":        false,
		"#!/bin/sh --lib=" + bin + "\n": false,
		"#!/bin/sh --lib=x/usr\n":       true,
	} {
		prog := filepath.Join(bin, "o")
		rtMust(t, os.WriteFile(prog, []byte(line), 0o755))
		if _, err := lookPath(prog, func() string { return "" }); (err != nil) != refused {
			t.Errorf("%q: %v, want refused %v", line, err, refused)
		}
	}
}

// A script this user may run but not read (mode 0111): the kernel reads
// its #! line anyway, so one that cannot be read is refused, not passed.
// Run as nobody, in a child process of this test binary.
func TestUnreadableScriptRefused(t *testing.T) {
	if os.Getenv("BRIDGE_TEST_UNREADABLE") != "" {
		for _, prog := range strings.Split(os.Getenv("BRIDGE_TEST_UNREADABLE"), ",") {
			_, err := lookPath(prog, func() string { return "" })
			fmt.Printf("lookPath: %v\n", err)
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a child as another user")
	}
	base, bin, open := rtSetup(t)
	rtMust(t, os.Chmod(filepath.Dir(base), 0o755)) // t.TempDir's own parent: nobody may pass
	rtMust(t, os.WriteFile(filepath.Join(open, "evil"), []byte("#!/bin/sh\necho EVIL\n"), 0o755))
	prog := filepath.Join(bin, "xo")
	rtMust(t, os.WriteFile(prog, []byte("#!"+filepath.Join(open, "evil")+"\n"), 0o111))
	rtMust(t, os.Chown(prog, 65534, 65534)) // nobody's own, run-only: its line unread is refused
	// Root's run-only program (RHEL's sudo is ---s--x--x): root wrote its
	// every byte, so it passes unread (red team: a false refusal).
	sudo := filepath.Join(bin, "sudo")
	rtMust(t, os.WriteFile(sudo, []byte("#!/bin/sh\n"), 0o755))
	rtMust(t, os.Chmod(sudo, 0o4111))
	// The test binary, where nobody may run it.
	self, err := os.Executable()
	rtMust(t, err)
	data, err := os.ReadFile(self)
	rtMust(t, err)
	exe := filepath.Join(base, "policy.test")
	rtMust(t, os.WriteFile(exe, data, 0o755))
	cmd := exec.Command(exe, "-test.run=^TestUnreadableScriptRefused$")
	cmd.Env = append(os.Environ(), "BRIDGE_TEST_UNREADABLE="+prog+","+sudo)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	// The directories are root's, which nobody's walk accepts as safe.
	if !strings.Contains(string(out), "lookPath: program "+prog) || !strings.Contains(string(out), "cannot be read to check it") ||
		!strings.Contains(string(out), "lookPath: <nil>") {
		t.Fatalf("nobody's execute-only script (refused), root's run-only program (passed), checked as nobody:\n%s", out)
	}
}
