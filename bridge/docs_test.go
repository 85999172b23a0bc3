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
