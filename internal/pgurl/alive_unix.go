//go:build unix

package pgurl

import (
	"errors"
	"syscall"
)

// peekNothing reads one byte of fd without taking it and without waiting:
// true when nothing is there yet.
func peekNothing(fd uintptr) bool {
	var b [1]byte
	// A byte read is a message waiting; none with no error is end of file;
	// any other error but "nothing yet" is a broken socket.
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EINTR)
}
