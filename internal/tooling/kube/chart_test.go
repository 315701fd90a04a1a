package kube_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemflow/idemflow/internal/tooling/kube"
)

// The checkout's root and the chart, from this package's folder.
var (
	root  = filepath.Join("..", "..", "..")
	chart = filepath.Join(root, "deploy", "helm", "idemflow")
)

func tools(t *testing.T) kube.Tools {
	t.Helper()
	tl, err := kube.Find(root)
	if err != nil {
		t.Fatal(err) // never a skip: CI installs them
	}
	return tl
}

// renderings are the chart's documented ways in: its defaults (with the
// two settings it requires) and every values file beside it.
func renderings(t *testing.T) map[string]kube.Values {
	t.Helper()
	out := map[string]kube.Values{
		"defaults": {Set: map[string]any{"database.url": "postgres://idemflow@db:5432/idemflow", "temporal.address": "temporal:7233"}},
	}
	files, err := filepath.Glob(filepath.Join(chart, "values-*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("values files: %v %v", files, err)
	}
	for _, f := range files {
		out[filepath.Base(f)] = kube.Values{Files: []string{f}}
	}
	return out
}

// Every documented values file renders, lints, validates strictly against
// the Kubernetes API's schemas, passes the policy linter with only the
// exceptions the chart states, and holds what the chart promises of every
// pod (restricted).
func TestTheChartRendersValidatesAndLintsWithEveryValuesFile(t *testing.T) {
	tl := tools(t)
	for name, v := range renderings(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			if err := tl.Lint(ctx, chart, v); err != nil {
				t.Fatal(err)
			}
			manifest, err := tl.Render(ctx, chart, "idemflow", v)
			if err != nil {
				t.Fatal(err)
			}
			unknown, err := tl.ValidateStrict(ctx, manifest)
			if err != nil {
				t.Fatal(err)
			}
			objects, err := kube.Decode(manifest)
			if err != nil {
				t.Fatal(err)
			}
			for _, kind := range unknown {
				if kind != "ServiceMonitor" {
					t.Errorf("kind %s has no schema to validate against", kind)
				}
			}
			if slices.Contains(unknown, "ServiceMonitor") {
				if err := serviceMonitorHolds(objects); err != nil {
					t.Error(err)
				}
			}
			if err := tl.Score(ctx, manifest); err != nil {
				t.Fatal(err)
			}
			if err := restricted(objects); err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, o := range objects {
				kinds = append(kinds, o.Kind()+"/"+o.Name())
			}
			t.Logf("%d objects: %s", len(objects), strings.Join(kinds, " "))
		})
	}
}

// The checks above fail on what they guard: a field the API does not
// define, a privileged container, a Deployment without probes.
func TestTheChartChecksRefuseWhatTheyGuard(t *testing.T) {
	tl := tools(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	manifest, err := tl.Render(ctx, chart, "idemflow", renderings(t)["defaults"])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, from, to, check string }{
		{"a field the API does not define", "revisionHistoryLimit: 5", "revisionHistoryLimit: 5\n  bogusField: 1", "schema"},
		{"a privileged container", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: false\n            privileged: true", "linter"},
		{"privilege escalation", "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true", "restricted"},
		{"a writable root file system", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "restricted"},
		{"no readiness probe", "readinessProbe:", "xReadinessProbe:", "restricted"},
	} {
		broken := []byte(strings.Replace(string(manifest), c.from, c.to, 1))
		if string(broken) == string(manifest) {
			t.Fatalf("%s: %q is not in the rendering", c.name, c.from)
		}
		var err error
		switch c.check {
		case "schema":
			_, err = tl.ValidateStrict(ctx, broken)
		case "linter":
			err = tl.Score(ctx, broken)
		case "restricted":
			var objects []kube.Object
			if objects, err = kube.Decode(broken); err == nil {
				err = restricted(objects)
			}
		}
		if err == nil {
			t.Errorf("%s: the %s check passed it", c.name, c.check)
		} else {
			t.Logf("%s: the %s check refused it: %.200s", c.name, c.check, err)
		}
	}
}

// restricted holds every pod of the chart to what it promises: the
// Kubernetes "restricted" security profile, a read-only root, resources,
// probes on every Deployment, a grace that covers the drain, and no secret
// as a plain value.
func restricted(objects []kube.Object) error {
	var errs []string
	for _, o := range objects {
		if o.Kind() != "Deployment" && o.Kind() != "Job" {
			continue
		}
		pod := o.PodSpec()
		where := o.Kind() + "/" + o.Name()
		if pod.Get("securityContext", "runAsNonRoot") != true || pod.Str("securityContext", "seccompProfile", "type") != "RuntimeDefault" {
			errs = append(errs, where+": the pod may run as root or without seccomp RuntimeDefault")
		}
		if pod.Get("automountServiceAccountToken") != false {
			errs = append(errs, where+": the pod mounts a service account token it has no use for")
		}
		if o.Kind() == "Deployment" {
			grace, _ := pod.Get("terminationGracePeriodSeconds").(int)
			// --shutdown-grace (5 s), 10 s for the requests held, 30 s
			// for the worker's drain (docs/operations.md, Shutdown).
			if grace < 45 {
				errs = append(errs, fmt.Sprintf("%s: terminationGracePeriodSeconds %d does not cover the drain (45 s)", where, grace))
			}
		}
		for _, c := range o.Containers() {
			sc := c.Raw
			at := where + " " + c.Name
			if sc.Get("securityContext", "allowPrivilegeEscalation") != false || sc.Get("securityContext", "readOnlyRootFilesystem") != true ||
				sc.Get("securityContext", "runAsNonRoot") != true || fmt.Sprint(sc.Get("securityContext", "capabilities", "drop")) != "[ALL]" {
				errs = append(errs, at+": not restricted (privilege escalation, a writable root, root, or capabilities kept)")
			}
			if sc.Get("resources", "requests", "memory") == nil || sc.Get("resources", "limits", "memory") == nil {
				errs = append(errs, at+": no memory request and limit")
			}
			if o.Kind() == "Deployment" {
				for _, p := range []string{"startup", "liveness", "readiness"} {
					if _, ok := c.Probe[p]; !ok && (p != "startup" || c.Name != "mcp") {
						errs = append(errs, at+": no "+p+" probe")
					}
				}
			}
			for _, e := range c.Env {
				if strings.Contains(e.Name, "URL") && strings.Contains(e.Value, "@") || strings.Contains(e.Name, "TOKEN") && e.Value != "" || strings.HasSuffix(e.Name, "API_KEY") && e.Value != "" {
					errs = append(errs, at+": "+e.Name+" is a value in the pod spec, not a Secret's key")
				}
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

// serviceMonitorHolds checks the ServiceMonitor, whose CRD's schema the
// Kubernetes API's schemas do not ship, for what the Prometheus Operator
// needs of it: a selector that finds the release's Services, and endpoints
// that name a port and a path.
func serviceMonitorHolds(objects []kube.Object) error {
	for _, o := range objects {
		if o.Kind() != "ServiceMonitor" {
			continue
		}
		if o.Str("apiVersion") != "monitoring.coreos.com/v1" || o.Str("spec", "selector", "matchLabels", "app.kubernetes.io/name") != "idemflow" {
			return fmt.Errorf("ServiceMonitor %s: apiVersion or selector off", o.Name())
		}
		eps, _ := o.Get("spec", "endpoints").([]any)
		if len(eps) == 0 {
			return fmt.Errorf("ServiceMonitor %s: no endpoints", o.Name())
		}
		for _, e := range eps {
			ep := kube.Object(e.(map[string]any))
			if ep.Str("port") == "" || ep.Str("path") != "/metrics" {
				return fmt.Errorf("ServiceMonitor %s: an endpoint without a port or /metrics", o.Name())
			}
			for k := range ep {
				if !slices.Contains([]string{"port", "path", "interval"}, k) {
					return fmt.Errorf("ServiceMonitor %s: endpoint field %s", o.Name(), k)
				}
			}
		}
	}
	return nil
}

// The dashboard the chart ships is deploy/grafana/idemflow.json itself
// (a link), never a copy that could drift.
func TestTheChartsDashboardIsTheOneOperationsDescribes(t *testing.T) {
	link := filepath.Join(chart, "files", "idemflow-dashboard.json")
	target, err := os.Readlink(link)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Clean(filepath.Join(filepath.Dir(link), target)) != filepath.Join(root, "deploy", "grafana", "idemflow.json") {
		t.Fatalf("%s links to %s", link, target)
	}
}
