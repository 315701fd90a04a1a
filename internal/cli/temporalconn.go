package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
)

// temporalTLS is how a process reaches a Temporal server that is not on
// its own machine: TLS with a server CA, mTLS with a client certificate
// (a self-hosted cluster, or Temporal Cloud's mTLS namespaces), or an API
// key (Temporal Cloud). Files are read at start-up; a bad one is a start-up
// error that names the flag, never its contents.
type temporalTLS struct {
	enabled                   bool
	ca, cert, key, serverName string
	apiKey                    string
	// profile is Temporal's client configuration (resolveTemporal), used
	// when none of the above is given.
	profile *envconfig.ClientConfigProfile
}

// given reports whether any TLS setting or the API key was given.
func (t temporalTLS) given() bool {
	return t.enabled || t.ca != "" || t.cert != "" || t.key != "" || t.serverName != "" || t.apiKey != ""
}

func (t *temporalTLS) register(fs *flag.FlagSet) {
	fs.BoolVar(&t.enabled, "temporal-tls", false, "connect to Temporal over TLS with the system's roots (implied by the other TLS flags and the API key) (env TEMPORAL_TLS)")
	fs.StringVar(&t.ca, "temporal-tls-ca", "", "PEM file of the CA that signed Temporal's server certificate (env TEMPORAL_TLS_CA)")
	fs.StringVar(&t.cert, "temporal-tls-cert", "", "PEM client certificate for mTLS (env TEMPORAL_TLS_CERT)")
	fs.StringVar(&t.key, "temporal-tls-key", "", "PEM private key of --temporal-tls-cert (env TEMPORAL_TLS_KEY)")
	fs.StringVar(&t.serverName, "temporal-tls-server-name", "", "server name to verify, when it differs from the address's host (env TEMPORAL_TLS_SERVER_NAME)")
	fs.StringVar(&t.apiKey, "temporal-api-key", "", "Temporal Cloud API key, sent as a bearer token over TLS (env TEMPORAL_API_KEY)")
}

// apply sets opts' TLS and credentials.
func (t temporalTLS) apply(opts *client.Options) error {
	if (t.cert == "") != (t.key == "") {
		return fmt.Errorf("%w: --temporal-tls-cert and --temporal-tls-key go together", errUsage)
	}
	if !t.given() {
		if t.profile == nil {
			return nil
		}
		// TLS, credentials and headers as the Temporal CLI would set them.
		p := *t.profile
		p.Address, p.Namespace = opts.HostPort, opts.Namespace
		from, err := p.ToClientOptions(envconfig.ToClientOptionsRequest{})
		if err != nil {
			return fmt.Errorf("%w: Temporal client configuration: %w", errUsage, err)
		}
		opts.ConnectionOptions.TLS, opts.Credentials, opts.HeadersProvider = from.ConnectionOptions.TLS, from.Credentials, from.HeadersProvider
		opts.ConnectionOptions.Authority = from.ConnectionOptions.Authority
		return nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.serverName}
	if t.ca != "" {
		pem, err := os.ReadFile(t.ca)
		if err != nil {
			return fmt.Errorf("--temporal-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%w: --temporal-tls-ca %s holds no PEM certificate", errUsage, t.ca)
		}
		cfg.RootCAs = pool
	}
	if t.cert != "" {
		pair, err := tls.LoadX509KeyPair(t.cert, t.key)
		if err != nil {
			return fmt.Errorf("--temporal-tls-cert/--temporal-tls-key: %w", errors.Unwrap(err))
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	opts.ConnectionOptions.TLS = cfg
	if t.apiKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(t.apiKey)
	}
	return nil
}
