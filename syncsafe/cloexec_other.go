//go:build !unix

package syncsafe

import "github.com/rjeczalik/notify"

// CloseOnExec does nothing here: Windows handles are not inherited unless
// a program asks for it.
func CloseOnExec() {}

func watch(path string, c chan<- notify.EventInfo, events ...notify.Event) error {
	return notify.Watch(path, c, events...)
}
