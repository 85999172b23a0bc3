package bridge

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDesignNamesRealTests keeps docs/DESIGN.md honest: every invariant names
// its guarding tests, and every test or script it names exists.
func TestDesignNamesRealTests(t *testing.T) {
	doc, err := os.ReadFile("../docs/DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	var sources strings.Builder
	filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, "_test.go") {
			b, _ := os.ReadFile(p)
			sources.Write(b)
		}
		return nil
	})
	names := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]+)`").FindAllStringSubmatch(string(doc), -1)
	if len(names) < 20 {
		t.Fatalf("DESIGN.md names only %d tests", len(names))
	}
	for _, m := range names {
		if !strings.Contains(sources.String(), "func "+m[1]+"(") {
			t.Errorf("DESIGN.md names %s, which does not exist", m[1])
		}
	}
	for _, m := range regexp.MustCompile("`(cmd/bridge/testdata/[a-z0-9-]+\\.txt)`").FindAllStringSubmatch(string(doc), -1) {
		if _, err := os.Stat(filepath.Join("..", m[1])); err != nil {
			t.Errorf("DESIGN.md names %s, which does not exist", m[1])
		}
	}
	// Each of the ten invariants names at least one guard.
	for i := 1; i <= 10; i++ {
		if !strings.Contains(string(doc), "`TestInvariant"+strconv.Itoa(i)) {
			t.Errorf("invariant %d has no TestInvariant%d guard in DESIGN.md", i, i)
		}
	}
}

// TestDocsClientSettings keeps docs/OPERATIONS.md's sync-client settings and
// the files the real-client tests run (fixtures/clients) the same: each file
// must appear in the doc as a fenced block, byte for byte.
func TestDocsClientSettings(t *testing.T) {
	doc, err := os.ReadFile("../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string]bool{}
	for _, m := range regexp.MustCompile("(?ms)^```[a-z]*\n(.*?)^```$").FindAllStringSubmatch(string(doc), -1) {
		blocks[m[1]] = true
	}
	for _, name := range []string{"unison.prf", "rclone-filters.txt", "rclone-loop.sh"} {
		b, err := os.ReadFile(filepath.Join("..", "fixtures", "clients", name))
		if err != nil {
			t.Fatal(err)
		}
		if !blocks[string(b)] {
			t.Errorf("docs/OPERATIONS.md does not show fixtures/clients/%s as it is, in a fenced block", name)
		}
		if !strings.Contains(string(doc), "fixtures/clients/"+name) {
			t.Errorf("docs/OPERATIONS.md does not name fixtures/clients/%s", name)
		}
	}
}

// TestDocPointersResolve keeps the pointers into the docs true: every
// "DESIGN §N" or "SPEC §N" (with or without .md) in the code and the docs
// names a section the document has, no code points at the seed's design
// notes (design.md, which is not in this repository), and TESTING.md counts
// the vectors fixtures/vectors holds.
func TestDocPointersResolve(t *testing.T) {
	sections := map[string]map[string]bool{}
	for _, doc := range []string{"DESIGN", "SPEC"} {
		b, err := os.ReadFile("../docs/" + doc + ".md")
		if err != nil {
			t.Fatal(err)
		}
		sections[doc] = map[string]bool{}
		for _, m := range regexp.MustCompile(`(?m)^## ([0-9]+[a-z]?)\. `).FindAllStringSubmatch(string(b), -1) {
			sections[doc][m[1]] = true
		}
		if len(sections[doc]) < 5 {
			t.Fatalf("%s.md: only %d numbered sections found", doc, len(sections[doc]))
		}
	}
	pointer := regexp.MustCompile(`\b(DESIGN|SPEC)(?:\.md)?,? §+([0-9]+[a-z]?)`)
	seed := regexp.MustCompile(`\bdesign\.md §`)
	checked := 0
	filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, ".md") && !strings.HasSuffix(p, ".txt") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Error(err)
			return nil
		}
		for _, m := range pointer.FindAllStringSubmatch(string(b), -1) {
			checked++
			if !sections[m[1]][m[2]] {
				t.Errorf("%s: %q points at a section %s.md does not have", p, m[0], m[1])
			}
		}
		if strings.HasSuffix(p, ".go") && seed.Match(b) {
			t.Errorf("%s: points at design.md, the seed's notes, not at docs/DESIGN.md", p)
		}
		return nil
	})
	if checked < 50 {
		t.Fatalf("only %d pointers found: is the pattern right?", checked)
	}
	vectors, err := filepath.Glob("../fixtures/vectors/*.txtar")
	if err != nil || len(vectors) == 0 {
		t.Fatalf("no vectors: %v", err)
	}
	testing_, err := os.ReadFile("../docs/TESTING.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("every archive in `fixtures/vectors/` \\(([0-9]+) of them\\)").FindSubmatch(testing_)
	if m == nil {
		t.Fatal("TESTING.md no longer counts the vectors where this test looks")
	}
	if n, _ := strconv.Atoi(string(m[1])); n != len(vectors) {
		t.Errorf("TESTING.md counts %d vectors; fixtures/vectors holds %d", n, len(vectors))
	}
}

// TestOperationsNamesEveryDoctorCheck keeps docs/OPERATIONS.md's table of
// `bridge doctor`'s checks whole: every check the code reports (a finding
// made with add("name", ...) or Check: "name") has a row, and every row is
// a check the code reports (a new user met four missing rows).
func TestOperationsNamesEveryDoctorCheck(t *testing.T) {
	doc, err := os.ReadFile("../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "| check | problem / warning | fix |")
	if !ok {
		t.Fatal("OPERATIONS.md has no table of doctor's checks where this test looks")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\|").FindAllStringSubmatch(table, -1) {
		rows[m[1]] = true
	}
	made := map[string]string{}
	finding := regexp.MustCompile(`\badd\("([a-z-]+)"|\bCheck: +"([a-z-]+)"`)
	for _, dir := range []string{"doctor", "host", "../cmd/bridge"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range finding.FindAllStringSubmatch(string(b), -1) {
				made[m[1]+m[2]] = f
			}
		}
	}
	if len(made) < 15 {
		t.Fatalf("found only %d checks in the code: is the pattern right?", len(made))
	}
	for name, f := range made {
		if !rows[name] {
			t.Errorf("doctor's check %q (%s) has no row in OPERATIONS.md", name, f)
		}
	}
	for name := range rows {
		if made[name] == "" {
			t.Errorf("OPERATIONS.md has a row for check %q, which the code does not report", name)
		}
	}
}
