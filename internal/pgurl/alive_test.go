package pgurl

import (
	"net"
	"testing"
	"time"
)

// A socket with nothing to read is alive; one the other side wrote to
// while it sat idle (the server's FATAL goodbye) or closed is not. The
// look takes no byte and does not wait.
func TestSocketAliveSeesAGoodbyeWithoutTakingIt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if !socketAlive(client) {
		t.Fatal("a quiet socket was taken as dead")
	}
	if _, err := server.Write([]byte("E")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return !socketAlive(client) }, "a socket with a message waiting was taken as alive")
	// The look took nothing: the byte is still there to read.
	b := make([]byte, 1)
	client.SetReadDeadline(time.Now().Add(time.Second))
	if n, err := client.Read(b); n != 1 || b[0] != 'E' {
		t.Fatalf("after the look, read %d %q %v: the look consumed the byte", n, b[:n], err)
	}
	if !socketAlive(client) {
		t.Fatal("a quiet socket again was taken as dead")
	}
	server.Close()
	waitFor(t, func() bool { return !socketAlive(client) }, "a socket at end of file was taken as alive")
}

func waitFor(t *testing.T, ok func() bool, failure string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(failure)
		}
	}
}
