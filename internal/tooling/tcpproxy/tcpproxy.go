// Package tcpproxy is the loopback TCP proxy of bench and chaos: it
// forwards each connection it accepts to a target, and a Shaper decides
// how the connection's two directions are copied. DelayLine adds a
// network's round trip (bench's --pg-latency and --temporal-latency);
// chaos shapes its faults with it (a reply dropped or held past the
// caller's timeout, latency on a share of connections).
package tcpproxy

import (
	"io"
	"net"
	"sync"
	"time"
)

// Shaper copies one proxied connection both ways and returns once both
// directions have ended. client is the accepted connection, server the
// one dialed to the target; the proxy closes both afterwards.
type Shaper func(client, server net.Conn)

// Proxy forwards connections from Addr to a target.
type Proxy struct {
	// Addr is where the proxy listens (loopback).
	Addr   string
	target string
	shape  Shaper
	ln     net.Listener
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// Listen opens a proxy to target on a free loopback port, shaping each
// connection with shape.
func Listen(target string, shape Shaper) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, shape: shape, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Close stops the proxy and the connections through it, as a link that
// goes down.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// Move points the proxy at target from now on and cuts every connection it
// carries, as a virtual IP that moves to another host does (a failover):
// a caller's next connection reaches target, and one that was open sees
// its peer hang up.
func (p *Proxy) Move(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.Cut()
}

// Cut hangs up on every connection the proxy carries, bytes in flight
// lost with them, as a link that fails does; new ones are taken as before.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(c)
		}()
	}
}

// untrack forgets connections that ended (handle adds them, under the
// lock that Move and Cut take).
func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.conns, c)
	}
}

func (p *Proxy) handle(client net.Conn) {
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		// The caller sees the connection close: the target is down.
		_ = client.Close()
		return
	}
	p.mu.Lock()
	if p.target != target {
		// Moved while this connection was dialed: it belongs to the
		// host the proxy left.
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.conns[client], p.conns[server] = struct{}{}, struct{}{}
	p.mu.Unlock()
	defer func() {
		p.untrack(client, server)
		_ = client.Close()
		_ = server.Close()
	}()
	p.shape(client, server)
}

// Both runs up (client to server) and down (server to client) at once,
// and returns once both have ended; when one ends first, both connections
// are closed, as a peer across a network would see the hang-up.
func Both(client, server net.Conn, up, down func()) {
	done := make(chan struct{}, 2)
	go func() { up(); done <- struct{}{} }()
	go func() { down(); done <- struct{}{} }()
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
}

// CopyLagged copies src to dst, each chunk written lag after it was read
// and only then the next one read (a slow link, not a delay line); then
// it closes dst for writing.
func CopyLagged(dst, src net.Conn, lag time.Duration) {
	defer CloseWrite(dst)
	if lag == 0 {
		_, _ = io.Copy(dst, src)
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			time.Sleep(lag)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// CloseWrite closes c for writing (all of c when it is not TCP), so that
// the peer reads the end of the stream.
func CloseWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		return
	}
	_ = c.Close()
}
