package patroni

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemflow/idemflow/internal/tooling/docs"
	"github.com/idemflow/idemflow/internal/tooling/tcpproxy"
	"gopkg.in/yaml.v3"
)

// docs/production.md gives the Patroni settings idemflow is proven with:
// its block, loaded as YAML, is what the tested cluster's members put in
// bootstrap.dcs, setting for setting.
func TestTheDocumentedSettingsAreTheClusters(t *testing.T) {
	blocks, err := docs.Blocks("../../../docs/production.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented map[string]any
	for _, b := range blocks {
		if strings.Contains(b.Marker, "TestTheDocumentedSettingsAreTheClusters") {
			if err := yaml.Unmarshal([]byte(b.Text), &documented); err != nil {
				t.Fatalf("docs/production.md's Patroni settings are not YAML: %v", err)
			}
		}
	}
	if len(documented) == 0 {
		t.Fatal("docs/production.md has no block this test runs")
	}
	c := &Cluster{cfg: Config{Dir: "/d"}}
	m := &member{name: "pg1", dir: "/d/pg1", pgAddr: "127.0.0.1:1", rest: "127.0.0.1:2", link: &tcpproxy.Proxy{Addr: "127.0.0.1:3"}}
	var conf struct {
		Bootstrap struct {
			DCS map[string]any `yaml:"dcs"`
		} `yaml:"bootstrap"`
	}
	if err := yaml.Unmarshal([]byte(c.memberConfig(m, "127.0.0.1:4", "/bin")), &conf); err != nil {
		t.Fatal(err)
	}
	for _, path := range leaves(documented, "") {
		want, got := lookup(documented, path), lookup(conf.Bootstrap.DCS, path)
		if fmt.Sprint(want) != fmt.Sprint(got) {
			t.Errorf("%s: docs/production.md says %v, the tested cluster has %v", path, want, got)
		}
	}
}

// leaves are the dotted paths of m's values that are not maps.
func leaves(m map[string]any, prefix string) []string {
	var out []string
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			out = append(out, leaves(sub, prefix+k+".")...)
		} else {
			out = append(out, prefix+k)
		}
	}
	return out
}

func lookup(m map[string]any, path string) any {
	var v any = m
	for _, k := range strings.Split(path, ".") {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}
