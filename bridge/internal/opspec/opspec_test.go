package opspec

import (
	"errors"
	"strings"
	"testing"
)

// An agent's check of a call against the catalog: what only the host can
// see (where a path leads) is left to it, every other rule refuses here as
// the host's policy would, with the same words.
func TestCheckArgs(t *testing.T) {
	one, ten := int64(1), int64(10)
	info := &OpInfo{Name: "op", Args: []ArgInfo{
		{Name: "file", Type: "path", Required: true},
		{Name: "n", Type: "int", Min: &one, Max: &ten},
		{Name: "level", Type: "enum", Values: []string{"quiet", "verbose"}},
		{Name: "run", Type: "string", Pattern: "[A-Za-z]+", MaxLen: 8},
	}}
	for _, c := range []struct {
		args map[string]string
		want string // "" = fine
	}{
		{map[string]string{"file": "a/b.go"}, ""},
		{map[string]string{"file": "/abs/elsewhere"}, ""}, // only the host knows its root
		{map[string]string{"file": "a", "n": "10", "level": "quiet", "run": "Test"}, ""},
		{map[string]string{}, `argument "file": missing required argument`},
		{map[string]string{"file": "a", "fil": "b"}, `did you mean "file"?`},
		{map[string]string{"file": "../x"}, ""},        // the root may be /, or hold it: only the host knows
		{map[string]string{"file": "sub/../../x"}, ""}, // the same
		{map[string]string{"file": ""}, "empty path"},
		{map[string]string{"file": "a\x00b"}, "contains NUL"},
		{map[string]string{"file": "a", "n": "11"}, "above the maximum 10"},
		{map[string]string{"file": "a", "n": "007"}, "not a canonical decimal"},
		{map[string]string{"file": "a", "level": "loud"}, "not one of quiet, verbose"},
		{map[string]string{"file": "a", "run": "Test_1"}, "does not match pattern"},
		{map[string]string{"file": "a", "run": "-x"}, "starts with '-'"},
		{map[string]string{"file": "a", "run": "abcdefghi"}, "longer than 8 bytes"},
	} {
		err := info.CheckArgs(c.args)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalidArg)):
			t.Errorf("%v: err = %v, want %q", c.args, err, c.want)
		}
	}
}
