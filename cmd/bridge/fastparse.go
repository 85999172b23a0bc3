package main

import (
	"io"
	"strings"

	"github.com/alecthomas/kong"
)

// A `bridge` process per request (an agent's harness runs `bridge run` or
// `bridge status` for each call) pays kong's model building on every start:
// reflection over every command's fields and tags, and a regexp
// interpolation of every help text, most of a start's CPU. The commands run
// that way are parsed first against a CLI holding that one command; a line
// that parses there parses the same in the whole CLI (the same fields,
// flags and globals). Anything else, an error or a request for help
// included, goes to the whole CLI, whose errors and help stand as they are.
// TestFastCommandsMatchCLI keeps each one's tags those of CLI's field.

type fastRun struct {
	Globals
	Run RunCmd `cmd:"" help:"Agent: submit an op, wait, print its output and exit with its exit code."`
}

type fastSubmit struct {
	Globals
	Submit SubmitCmd `cmd:"" help:"Agent: submit an op and print the request id."`
}

type fastStatus struct {
	Globals
	Status StatusCmd `cmd:"" help:"Agent: show a request's state (reads only)."`
}

type fastWait struct {
	Globals
	Wait WaitCmd `cmd:"" help:"Agent: wait for requests' results and print each as it lands (a pure read, unless --ack)."`
}

type fastResult struct {
	Globals
	Result ResultCmd `cmd:"" help:"Agent: print a request's output and exit with its exit code."`
}

type fastCancel struct {
	Globals
	Cancel CancelCmd `cmd:"" help:"Agent: ask the host to cancel a request."`
}

type fastVersion struct {
	Globals
	Version VersionCmd `cmd:"" help:"Print the version, commit and platform of this build."`
}

// fastModel returns a CLI of the one command args name, and its globals;
// nil when args are not for the fast path.
func fastModel(args []string) (any, *Globals) {
	word := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--" || a == "--help" || a == "--version" || strings.HasPrefix(a, "--help=") || strings.HasPrefix(a, "--version="):
			return nil, nil
		case strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--"):
			return nil, nil // short flags (-h): the whole CLI
		case word != "":
		case a == "--home":
			i++ // its value
		case strings.HasPrefix(a, "-"):
		default:
			word = a
		}
	}
	switch word {
	case "run":
		m := &fastRun{}
		return m, &m.Globals
	case "submit":
		m := &fastSubmit{}
		return m, &m.Globals
	case "status":
		m := &fastStatus{}
		return m, &m.Globals
	case "wait":
		m := &fastWait{}
		return m, &m.Globals
	case "result":
		m := &fastResult{}
		return m, &m.Globals
	case "cancel":
		m := &fastCancel{}
		return m, &m.Globals
	case "version":
		m := &fastVersion{}
		return m, &m.Globals
	}
	return nil, nil
}

// fastParse parses args against the one command they name, or returns
// nil: then the whole CLI parses them.
func fastParse(args []string, stdin io.Reader, stdout, stderr io.Writer) (*kong.Context, *Globals) {
	model, g := fastModel(args)
	if model == nil {
		return nil, nil
	}
	g.stdout, g.stderr, g.stdin, g.args = stdout, stderr, stdin, args
	parser, err := kong.New(model, parserOptions(stdout, stderr, func(int) { panic(kongExit{}) })...)
	if err != nil {
		return nil, nil
	}
	kctx, err := func() (kctx *kong.Context, err error) {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(kongExit); !ok {
					panic(r)
				}
				kctx, err = nil, errFastExit
			}
		}()
		return parser.Parse(args)
	}()
	if err != nil {
		return nil, nil
	}
	return kctx, g
}

// errFastExit: the fast parse wanted to exit (help, version): the whole
// CLI does it.
var errFastExit = &codeError{code: exitUsage}
