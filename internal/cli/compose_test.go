package cli_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/internal/cli"
	"github.com/idemflow/idemflow/internal/tooling/docs"
	"gopkg.in/yaml.v3"
)

// docker-compose.yml stays in step with the binary and the README: every
// image is pinned, every idemflow command and flag it runs exists, its
// health check probes /readyz, the README's services are there, and the
// Temporal images match the server version the README and go.mod name.
func TestComposeFileMatchesTheBinaryAndTheReadme(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image       string   `yaml:"image"`
			Command     []string `yaml:"command"`
			Healthcheck struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
			Ports   []string `yaml:"ports"`
			Volumes []string `yaml:"volumes"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	readme, err := docs.Read("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"postgres", "temporal", "temporal-ui", "migrate", "idemflow"} {
		if _, ok := compose.Services[name]; !ok {
			t.Errorf("service %s is missing", name)
		}
	}
	for name, s := range compose.Services {
		if s.Image == "" || !strings.Contains(s.Image, ":") || strings.HasSuffix(s.Image, ":latest") {
			t.Errorf("service %s: image %q is not pinned", name, s.Image)
		}
		if strings.HasPrefix(s.Image, "temporalio/server:") || strings.HasPrefix(s.Image, "temporalio/admin-tools:") {
			if !strings.HasSuffix(s.Image, ":1.32.0") {
				t.Errorf("service %s: %s is not the server version idemflow embeds and tests (1.32.0)", name, s.Image)
			}
		}
		if s.Image != "idemflow:local" || len(s.Command) == 0 {
			continue
		}
		// The command and each of its flags exist: its help lists them.
		var out, errOut strings.Builder
		cli.Run(t.Context(), []string{s.Command[0], "-h"}, &out, &errOut)
		help := out.String() + errOut.String()
		if !strings.Contains(help, "Usage of idemflow "+s.Command[0]) {
			t.Errorf("service %s runs 'idemflow %s', which is no command:\n%s", name, s.Command[0], help)
		}
		for _, f := range regexp.MustCompile(`(?m)^--?([a-z-]+)`).FindAllStringSubmatch(strings.Join(s.Command[1:], "\n"), -1) {
			if !strings.Contains(help, "-"+f[1]+" ") && !strings.Contains(help, "-"+f[1]+"\n") {
				t.Errorf("service %s: 'idemflow %s' has no flag -%s", name, s.Command[0], f[1])
			}
		}
	}
	if hc := strings.Join(compose.Services["idemflow"].Healthcheck.Test, " "); !strings.Contains(hc, "healthcheck") || !strings.Contains(hc, "/readyz") {
		t.Errorf("idemflow's health check %q does not probe /readyz", hc)
	}
	// '--scale idemflow=N', as docs/production.md gives it, works: no
	// replica publishes a host port (a second could not bind it); the
	// proxy does, and finds every replica by name, checking /readyz.
	if p := compose.Services["idemflow"].Ports; len(p) > 0 {
		t.Errorf("idemflow publishes %v: a second replica of 'docker compose up --scale idemflow=N' cannot bind it", p)
	}
	proxy := compose.Services["proxy"]
	if !slices.Contains(proxy.Ports, "8080:8080") || !slices.Contains(proxy.Volumes, "./deploy/haproxy/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro") {
		t.Errorf("the proxy publishes %v with %v, want the gateway's 8080 and deploy/haproxy/haproxy.cfg", proxy.Ports, proxy.Volumes)
	}
	cfg, err := os.ReadFile("../../deploy/haproxy/haproxy.cfg")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"server-template idemflow 10 idemflow:8080 check resolvers docker", "option httpchk GET /readyz",
		"stick store-response res.hdr(Mcp-Session-Id)", "bind :8080"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("deploy/haproxy/haproxy.cfg lacks %q", want)
		}
	}
	for _, want := range []string{"docker compose up", "--scale idemflow=N", "Temporal server 1.32"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README no longer says %q about the compose stack", want)
		}
	}
}

// The image's build caches what it says it caches, where the golang image
// keeps it (GOPATH /go), and its context carries .git (the revision
// 'idemflow version' names) but none of the clients' installed packages.
func TestTheDockerfileCachesWhereTheImageKeepsItsModulesAndShipsTheRevision(t *testing.T) {
	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	ignore, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(dockerfile), "target=/root/go/pkg/mod") || !strings.Contains(string(dockerfile), "--mount=type=cache,target=/go/pkg/mod") {
		t.Error("the Dockerfile's module cache is not at the golang image's /go/pkg/mod")
	}
	var lines []string
	for _, l := range strings.Split(string(ignore), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	if slices.Contains(lines, ".git") {
		t.Error(".dockerignore drops .git: the image's build cannot stamp its revision")
	}
	for _, want := range []string{"**/node_modules", "**/.venv"} {
		if !slices.Contains(lines, want) {
			t.Errorf(".dockerignore lacks %s", want)
		}
	}
}
