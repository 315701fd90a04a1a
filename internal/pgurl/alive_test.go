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
	client, server := socketPair(t)
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

// pgconn's background reader can still be parked in a read on a released
// connection's socket (it starts when a write blocks, and stops only when
// a byte arrives). The look must not queue behind it: a look through
// RawConn.Read waited on the socket's read lock for good, and with it the
// request that was acquiring the connection.
func TestSocketAliveDoesNotWaitForAReaderInProgress(t *testing.T) {
	client, _ := socketPair(t) // the server end stays open and quiet
	reading := make(chan struct{})
	go func() {
		close(reading)
		_, _ = client.Read(make([]byte, 1)) // parked until the socket closes
	}()
	<-reading
	time.Sleep(50 * time.Millisecond) // let the reader park on the socket
	looked := make(chan bool, 1)
	go func() { looked <- socketAlive(client) }()
	select {
	case alive := <-looked:
		if !alive {
			t.Fatal("a quiet socket with a reader parked on it was taken as dead")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the look waited 5 s behind a read in progress: a request acquiring this connection would hang")
	}
}

// socketPair connects two TCP sockets on the loopback, closed with the test.
func socketPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}
