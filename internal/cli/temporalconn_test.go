package cli

import (
	"os"
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/client"
)

// What the flags leave unset comes from Temporal's own client
// configuration, the TOML profiles and TEMPORAL_* variables the Temporal
// CLI reads; a flag (or its variable) always wins.
func TestTemporalSettingsFollowTheTemporalCLIsConfiguration(t *testing.T) {
	file := filepath.Join(t.TempDir(), "temporal.toml")
	toml := `
[profile.staging]
address = "staging.example:7233"
namespace = "staging-ns"
api_key = "s3cret-key"
`
	if err := os.WriteFile(file, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY", "TEMPORAL_TLS"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("TEMPORAL_CONFIG_FILE", file)
	t.Setenv("TEMPORAL_PROFILE", "staging")

	var c common
	if err := c.resolveTemporal(); err != nil {
		t.Fatal(err)
	}
	if c.temporal != "staging.example:7233" || c.namespace != "staging-ns" {
		t.Fatalf("from the profile: %q %q", c.temporal, c.namespace)
	}
	opts := client.Options{HostPort: c.temporal, Namespace: c.namespace}
	if err := c.tls.apply(&opts); err != nil {
		t.Fatal(err)
	}
	if opts.ConnectionOptions.TLS == nil || opts.Credentials == nil {
		t.Fatalf("the profile's API key must bring TLS and credentials: %+v", opts.ConnectionOptions)
	}

	explicit := common{temporal: "flag.example:7233", namespace: "flag-ns", tls: temporalTLS{ca: "/nonexistent"}}
	if err := explicit.resolveTemporal(); err != nil {
		t.Fatal(err)
	}
	if explicit.temporal != "flag.example:7233" || explicit.namespace != "flag-ns" || explicit.tls.profile != nil {
		t.Fatalf("a flag must win: %+v", explicit)
	}

	t.Setenv("TEMPORAL_PROFILE", "")
	t.Setenv("TEMPORAL_CONFIG_FILE", filepath.Join(t.TempDir(), "none.toml"))
	var none common
	if err := none.resolveTemporal(); err != nil {
		t.Fatalf("no configuration at all: %v", err)
	}
	if none.temporal != "127.0.0.1:7233" || none.namespace != "default" || none.tls.given() {
		t.Fatalf("defaults: %+v", none)
	}
}
