//go:build !nodev

package cli_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/testenv"
	"go.temporal.io/server/temporaltest"
)

// certs makes a CA and a certificate it signs; the files go to dir.
type pki struct {
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
	dir   string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "idemflow test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &pki{ca: ca, caKey: key, dir: t.TempDir()}
	p.write(t, "ca.pem", "CERTIFICATE", der)
	return p
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue signs a certificate for cn; server ones are for 127.0.0.1.
func (p *pki) issue(t *testing.T, cn string, server bool) (tls.Certificate, string, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile := p.write(t, cn+".pem", "CERTIFICATE", der), p.write(t, cn+"-key.pem", "EC PRIVATE KEY", kb)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return pair, certFile, keyFile
}

// A serve process reaches Temporal over mTLS, as it would reach Temporal
// Cloud or a cluster with TLS on its frontend: the embedded server sits
// behind a listener that requires TLS 1.2+ with a client certificate
// signed by the test CA (and ALPN h2, as gRPC asks), then forwards the
// decrypted stream. Tickets are created and replayed through it.
func TestServeReachesTemporalOverMutualTLS(t *testing.T) {
	_, dbURL := testenv.Pool(t)
	ts := temporaltest.NewServer(temporaltest.WithT(t))
	p := newPKI(t)
	serverCert, _, _ := p.issue(t, "temporal-frontend", true)
	_, clientCert, clientKey := p.issue(t, "idemflow-worker", false)
	roots := x509.NewCertPool()
	roots.AddCert(p.ca)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: roots,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	peers := map[string]int{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				if err := tc.Handshake(); err != nil {
					return
				}
				mu.Lock()
				peers[tc.ConnectionState().PeerCertificates[0].Subject.CommonName]++
				mu.Unlock()
				up, err := net.Dial("tcp", ts.GetFrontendHostPort())
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c) }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()

	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	srv := startChild(t, dbURL, "gateway listening", "serve", "--temporal-address", ln.Addr().String(),
		"--namespace", ts.GetDefaultNamespace(), "--http-addr", addr, "--bootstrap-tokens", "acme:tok-tls-test-0123456789",
		"--temporal-tls-ca", filepath.Join(p.dir, "ca.pem"), "--temporal-tls-cert", clientCert, "--temporal-tls-key", clientKey)
	srv.WaitUp(t, time.Minute)
	req := testenv.Request{Path: "/v1/tickets", Token: "tok-tls-test-0123456789", Key: "tls-1", Body: `{"customer_id":"c","title":"over TLS"}`}
	first, again := testenv.Do(t, "http://"+addr, req), testenv.Do(t, "http://"+addr, req)
	if first.Status != 201 || again.Status != 201 || string(first.Body) != string(again.Body) {
		t.Fatalf("over TLS: %d %s / %d %s\n%s", first.Status, first.Body, again.Status, again.Body, srv.Output())
	}
	mu.Lock()
	defer mu.Unlock()
	if peers["idemflow-worker"] == 0 {
		t.Fatalf("no connection presented the client certificate: %v", peers)
	}
}
