//go:build !unix

package main

// signals: with no signals of its own, this machine reports the Linux
// numbers, which is what a shell on the usual host would have said.
var signals = map[string]int{
	"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGILL": 4, "SIGABRT": 6, "SIGBUS": 7, "SIGFPE": 8, "SIGKILL": 9,
	"SIGSEGV": 11, "SIGPIPE": 13, "SIGALRM": 14, "SIGTERM": 15, "SIGXCPU": 24, "SIGXFSZ": 25, "SIGUSR1": 10, "SIGUSR2": 12,
}
