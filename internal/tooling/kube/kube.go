// Package kube renders idemflow's Helm chart (deploy/helm/idemflow) with
// the Helm that scripts/lib.sh installs, checks what it renders offline
// (the Kubernetes API's schemas, a policy linter), and reads the objects
// it renders, so that the chart's tests run what a cluster would be given.
package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// Tools are the programs the checks run, from the checkout's root.
type Tools struct {
	Helm, KubeScore, Validate string
}

// ErrMissing is a tool the scripts did not install.
var ErrMissing = errors.New("not installed: run scripts/test.sh, or (. scripts/lib.sh; build_kube_tools)")

// Find returns the tools under root (the checkout), or ErrMissing.
func Find(root string) (Tools, error) {
	t := Tools{
		Helm:      filepath.Join(root, "bin", "helm"),
		KubeScore: filepath.Join(root, "bin", "kube-score"),
		Validate:  filepath.Join(root, "internal", "tooling", "kube", ".venv", "bin", "kubernetes-validate"),
	}
	for _, p := range []string{t.Helm, t.KubeScore, t.Validate} {
		if _, err := os.Stat(p); err != nil {
			return Tools{}, fmt.Errorf("%s: %w", p, ErrMissing)
		}
	}
	return t, nil
}

// Values are the values of one rendering: files (-f), then single
// settings by dotted path ("temporal.address"), typed as YAML types them
// (a bool is a bool, a string stays a string whatever it holds).
type Values struct {
	Files []string
	Set   map[string]any
}

// args are helm's arguments for v; the settings go in a file in dir, which
// keeps every character of a value (--set would split one at a comma).
func (v Values) args(dir string) ([]string, error) {
	var out []string
	for _, f := range v.Files {
		out = append(out, "-f", f)
	}
	if len(v.Set) == 0 {
		return out, nil
	}
	tree := map[string]any{}
	for path, value := range v.Set {
		node := tree
		parts := strings.Split(path, ".")
		for _, p := range parts[:len(parts)-1] {
			next, ok := node[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				node[p] = next
			}
			node = next
		}
		node[parts[len(parts)-1]] = value
	}
	b, err := yaml.Marshal(tree)
	if err != nil {
		return nil, err
	}
	f := filepath.Join(dir, "set.yaml")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		return nil, err
	}
	return append(out, "-f", f), nil
}

// helm runs helm with args and then v's.
func (t Tools) helm(ctx context.Context, v Values, args ...string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "idemflow-helm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	more, err := v.args(dir)
	if err != nil {
		return nil, err
	}
	out, _, err := run(ctx, nil, t.Helm, append(args, more...)...)
	return out, err
}

// Render is 'helm template' of the chart with v, as the release named
// release would be installed.
func (t Tools) Render(ctx context.Context, chart, release string, v Values) ([]byte, error) {
	return t.helm(ctx, v, "template", release, chart)
}

// Lint is 'helm lint --strict' of the chart with v.
func (t Tools) Lint(ctx context.Context, chart string, v Values) error {
	_, err := t.helm(ctx, v, "lint", "--strict", chart)
	return err
}

// ValidateStrict checks every object of manifest against the Kubernetes
// API's own schemas (kubernetes-validate --strict: a field the API does not
// define is an error). Kinds the API does not define (a CRD's, such as the
// Prometheus Operator's ServiceMonitor) are not known to it: they are
// returned, for the caller to check otherwise, never passed in silence.
func (t Tools) ValidateStrict(ctx context.Context, manifest []byte) (unknownKinds []string, err error) {
	stdout, stderr, err := run(ctx, manifest, t.Validate, "--strict", "--quiet", "-")
	for _, line := range strings.Split(string(stdout)+string(stderr), "\n") {
		if _, rest, ok := strings.Cut(line, "Couldn't find schema for kind "); ok {
			unknownKinds = append(unknownKinds, strings.Fields(rest)[0])
		} else if strings.TrimSpace(line) != "" && err == nil {
			err = fmt.Errorf("kubernetes-validate: %s", line)
		}
	}
	return unknownKinds, err
}

// Score runs the policy linter (kube-score): an error lists what it found
// that the chart did not declare an exception for.
func (t Tools) Score(ctx context.Context, manifest []byte) error {
	_, _, err := run(ctx, manifest, t.KubeScore, "score", "--output-format", "ci", "-")
	return err
}

// run runs name with args and stdin, and returns its standard output and
// error; a non-zero exit is an error that carries both.
func run(ctx context.Context, stdin []byte, name string, args ...string) (stdout, stderr []byte, err error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.Bytes(), errOut.Bytes(), fmt.Errorf("%s %s: %w\n%s%s", filepath.Base(name), strings.Join(args, " "), err, out.Bytes(), errOut.Bytes())
	}
	return out.Bytes(), errOut.Bytes(), nil
}

// Object is one rendered object, as YAML decodes it.
type Object map[string]any

// Decode splits a rendered manifest into its objects.
func Decode(manifest []byte) ([]Object, error) {
	dec := yaml.NewDecoder(bytes.NewReader(manifest))
	var out []Object
	for {
		// A plain map: decoded into Object, the nested maps would be
		// Objects too, and Get reads plain ones.
		var o map[string]any
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decode the manifest: %w", err)
		}
		if o != nil {
			out = append(out, o)
		}
	}
}

// Kind is the object's kind.
func (o Object) Kind() string { s, _ := o["kind"].(string); return s }

// Name is the object's name.
func (o Object) Name() string { return o.Str("metadata", "name") }

// Get follows path through maps, and returns what is there, or nil.
func (o Object) Get(path ...string) any {
	var cur any = map[string]any(o)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

// Str is Get as a string ("" where it is not one).
func (o Object) Str(path ...string) string { s, _ := o.Get(path...).(string); return s }

// Lookup returns the object of kind named name, or nil.
func Lookup(objects []Object, kind, name string) Object {
	for _, o := range objects {
		if o.Kind() == kind && o.Name() == name {
			return o
		}
	}
	return nil
}

// PodSpec is the pod template's spec of a Deployment or a Job, or nil.
func (o Object) PodSpec() Object {
	m, _ := o.Get("spec", "template", "spec").(map[string]any)
	return m
}

// Container is what a rendered container runs.
type Container struct {
	Name  string
	Args  []string
	Env   []EnvVar
	Probe map[string]Probe // "startup", "liveness", "readiness"
	Raw   Object
}

// EnvVar is a container's variable: a value, or a key of a Secret.
type EnvVar struct {
	Name, Value       string
	Secret, SecretKey string
}

// Probe is an HTTP GET or TCP probe.
type Probe struct {
	Path, Port string
	TCP        bool
}

// Containers are the containers of a Deployment's or Job's pods.
func (o Object) Containers() []Container {
	list, _ := o.PodSpec().Get("containers").([]any)
	var out []Container
	for _, item := range list {
		m, _ := item.(map[string]any)
		c := Container{Raw: m, Probe: map[string]Probe{}}
		c.Name = c.Raw.Str("name")
		args, _ := m["args"].([]any)
		for _, a := range args {
			c.Args = append(c.Args, fmt.Sprint(a))
		}
		env, _ := m["env"].([]any)
		for _, e := range env {
			v := Object(e.(map[string]any))
			c.Env = append(c.Env, EnvVar{Name: v.Str("name"), Value: v.Str("value"),
				Secret: v.Str("valueFrom", "secretKeyRef", "name"), SecretKey: v.Str("valueFrom", "secretKeyRef", "key")})
		}
		for _, kind := range []string{"startup", "liveness", "readiness"} {
			p, ok := m[kind+"Probe"].(map[string]any)
			if !ok {
				continue
			}
			probe := Object(p)
			if probe.Get("tcpSocket") != nil {
				c.Probe[kind] = Probe{TCP: true, Port: fmt.Sprint(probe.Get("tcpSocket", "port"))}
			} else {
				c.Probe[kind] = Probe{Path: probe.Str("httpGet", "path"), Port: fmt.Sprint(probe.Get("httpGet", "port"))}
			}
		}
		out = append(out, c)
	}
	return out
}

// Environ is c's environment as a process gets it: each Secret's key read
// from the Secrets among objects (the chart's own; one it does not render
// is an error, as a missing Secret keeps a pod from starting).
func (c Container) Environ(objects []Object) ([]string, error) {
	var out []string
	for _, e := range c.Env {
		if e.Secret == "" {
			out = append(out, e.Name+"="+e.Value)
			continue
		}
		s := Lookup(objects, "Secret", e.Secret)
		if s == nil {
			return nil, fmt.Errorf("%s: Secret %s is not rendered", e.Name, e.Secret)
		}
		v, ok := s.Get("stringData", e.SecretKey).(string)
		if !ok {
			return nil, fmt.Errorf("%s: Secret %s has no key %s", e.Name, e.Secret, e.SecretKey)
		}
		out = append(out, e.Name+"="+v)
	}
	return out, nil
}
