//go:build unix

package main

import "syscall"

// signals maps a result's signal name to this machine's number, for the
// shell's 128+n exit status.
var signals = map[string]syscall.Signal{
	"SIGHUP": syscall.SIGHUP, "SIGINT": syscall.SIGINT, "SIGQUIT": syscall.SIGQUIT, "SIGILL": syscall.SIGILL,
	"SIGABRT": syscall.SIGABRT, "SIGBUS": syscall.SIGBUS, "SIGFPE": syscall.SIGFPE, "SIGKILL": syscall.SIGKILL,
	"SIGSEGV": syscall.SIGSEGV, "SIGPIPE": syscall.SIGPIPE, "SIGALRM": syscall.SIGALRM, "SIGTERM": syscall.SIGTERM,
	"SIGXCPU": syscall.SIGXCPU, "SIGXFSZ": syscall.SIGXFSZ, "SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2,
}
