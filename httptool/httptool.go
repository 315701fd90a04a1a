// Package httptool makes HTTP tools: operations declared in a YAML file,
// not in Go, whose effect is one call to a team's own HTTP API. It loads
// and checks the file, makes each tool an op operation (its route, MCP
// tool and OpenAPI path follow), makes the call and the lookup and judges
// their answers, and owns the tool_call table, what idemflow knows of each
// key's call. The activity that runs a call is activities.HTTPTool.
package httptool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/idemflow/idemflow/op"
	"gopkg.in/yaml.v3"
)

// Workflow and Activity are the names every HTTP tool's intents run
// under; the business type names the tool.
const (
	Workflow = "HTTPTool"
	Activity = "HTTPTool"
	// BizPrefix + name is a tool's business type and workflow-ID scope.
	BizPrefix = "tool."
	// RoutePrefix + name is a tool's route.
	RoutePrefix = "/v1/tools/"
)

// MaxTimeout bounds a tool's timeout: one activity attempt makes at most a
// lookup and a call, and must end within workflows.ActivityStartToClose
// (30 s), or Temporal would start the next attempt beside it.
const MaxTimeout = 10 * time.Second

// DefaultTimeout is a call's timeout when the file sets none.
const DefaultTimeout = 5 * time.Second

// Grace is how long past a call's timeout the call is taken to be over at
// the downstream, before a lookup may say that it did not happen.
const Grace = time.Second

// Rejection codes, for the metrics and GET /problems/{code}.
const (
	CodeRejected       = "downstream-rejected"
	CodeOutcomeUnknown = "outcome-unknown"
)

// File is a tools file.
type File struct {
	Tools []Spec `yaml:"tools"`
}

// Spec is one tool, as the file declares it.
type Spec struct {
	Name        string         `yaml:"name"`
	Description string         `yaml:"description"`
	InputSchema map[string]any `yaml:"input_schema"`
	// Intent names the input's members that make one call's intent, each
	// with its rule (id, text, number, set, exact): a caller keyed by
	// intent fields is compared on them alone (op.Spec.Intent).
	Intent []op.IntentField `yaml:"intent"`
	Call   CallSpec         `yaml:"call"`
	Lookup *LookupSpec      `yaml:"lookup"`
	// AtMostOnce accepts a tool with neither KeyHeader nor Lookup: an
	// outcome left unknown is then final, never sent again.
	AtMostOnce bool `yaml:"at_most_once"`
}

// CallSpec is the call that makes the effect.
type CallSpec struct {
	Method string `yaml:"method"`
	URL    string `yaml:"url"`
	// Headers' values may name ${VAR}s of idemflow's environment.
	Headers   map[string]string `yaml:"headers"`
	KeyHeader string            `yaml:"key_header"`
	// ReplayedHeader names the header by which a downstream that
	// deduplicates by KeyHeader marks an answer it gives again for a key
	// it has seen (Idempotent-Replayed: true, as Stripe and idemflow
	// mark theirs). With it, a refusal answered to a request sent again
	// after a lost answer is believed as the first request's answer.
	ReplayedHeader string `yaml:"replayed_header"`
	KeyField       string `yaml:"key_field"`
	Timeout        string `yaml:"timeout"`
}

// LookupSpec is the read that says what a key did: 200 with the effect as
// its body, 404 when there is none. {key} in URL is the downstream key.
type LookupSpec struct {
	URL string `yaml:"url"`
	// Headers default to the call's.
	Headers map[string]string `yaml:"headers"`
	// FoundStatus is the status a found effect is answered with: the
	// call's own success status (201, say), so that one intent's answer
	// does not depend on which fault happened. 0 keeps the lookup's 200.
	FoundStatus int `yaml:"found_status"`
}

// Tool is a loaded tool: its operation, and what its calls need.
type Tool struct {
	Name string
	Op   *op.Operation
	spec Spec
	// headers and lookupHeaders hold the values with the environment's
	// secrets in them: never logged, never put in an error, an answer or
	// a workflow input.
	headers, lookupHeaders http.Header
	timeout                time.Duration
	client                 *http.Client
}

// Set is the tools of one file. A nil *Set has none.
type Set struct {
	tools []*Tool
	byBiz map[string]*Tool
}

// Load reads and checks a tools file; getenv resolves the ${VAR}s of its
// headers (os.LookupEnv when nil). Every error names the file, the tool
// and the field.
func Load(path string, getenv func(string) (string, bool)) (*Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tools file: %w", err)
	}
	s, err := Parse(data, getenv)
	if err != nil {
		return nil, fmt.Errorf("tools file %s: %w", path, err)
	}
	return s, nil
}

// Parse checks a tools file's contents (see Load).
func Parse(data []byte, getenv func(string) (string, bool)) (*Set, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, err
	}
	if len(f.Tools) == 0 {
		return nil, errors.New("tools: the file declares no tool")
	}
	s := &Set{byBiz: map[string]*Tool{}}
	client := &http.Client{
		Transport: http.DefaultTransport.(*http.Transport).Clone(),
		// A redirect is an answer like any other 3xx (outcome unknown):
		// following it would turn a POST into a GET elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	for i, spec := range f.Tools {
		t, err := newTool(spec, getenv, client)
		if err != nil {
			name := spec.Name
			if name == "" {
				name = fmt.Sprintf("#%d", i+1)
			}
			return nil, fmt.Errorf("tool %s: %w", name, err)
		}
		if _, dup := s.byBiz[t.Op.BizType]; dup {
			return nil, fmt.Errorf("tool %s: name: declared twice", t.Name)
		}
		s.tools = append(s.tools, t)
		s.byBiz[t.Op.BizType] = t
	}
	return s, nil
}

var (
	headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	fieldName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	envRef     = regexp.MustCompile(`\$\{([^}]*)\}`)
	envName    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func newTool(spec Spec, getenv func(string) (string, bool), client *http.Client) (*Tool, error) {
	t := &Tool{Name: spec.Name, spec: spec, client: client, timeout: DefaultTimeout}
	if strings.TrimSpace(spec.Description) == "" {
		return nil, errors.New("description: is required (models read it to choose the tool)")
	}
	if spec.InputSchema == nil {
		return nil, errors.New("input_schema: is required")
	}
	c := spec.Call
	if !slices.Contains([]string{"POST", "PUT", "PATCH", "DELETE"}, c.Method) {
		return nil, fmt.Errorf("call.method: %q is not one of POST, PUT, PATCH, DELETE", c.Method)
	}
	if err := checkURL(c.URL); err != nil {
		return nil, fmt.Errorf("call.url: %w", err)
	}
	if c.KeyHeader != "" && !headerName.MatchString(c.KeyHeader) {
		return nil, fmt.Errorf("call.key_header: %q is not an HTTP header name", c.KeyHeader)
	}
	if c.ReplayedHeader != "" {
		if !headerName.MatchString(c.ReplayedHeader) {
			return nil, fmt.Errorf("call.replayed_header: %q is not an HTTP header name", c.ReplayedHeader)
		}
		if c.KeyHeader == "" {
			return nil, errors.New("call.replayed_header: needs call.key_header: only a downstream that deduplicates by a key header replays an answer")
		}
	}
	if c.KeyField != "" {
		if !fieldName.MatchString(c.KeyField) {
			return nil, fmt.Errorf("call.key_field: %q must match %s", c.KeyField, fieldName)
		}
		if props, _ := spec.InputSchema["properties"].(map[string]any); props[c.KeyField] != nil {
			return nil, fmt.Errorf("call.key_field: %q is also a property of input_schema; idemflow sets it, the agent must not", c.KeyField)
		}
	}
	if c.Timeout != "" {
		d, err := time.ParseDuration(c.Timeout)
		if err != nil || d <= 0 || d > MaxTimeout {
			return nil, fmt.Errorf("call.timeout: %q must be a duration above 0 and at most %s", c.Timeout, MaxTimeout)
		}
		t.timeout = d
	}
	var err error
	if t.headers, err = resolveHeaders("call.headers", c.Headers, getenv); err != nil {
		return nil, err
	}
	t.lookupHeaders = t.headers
	if l := spec.Lookup; l != nil {
		if !strings.Contains(l.URL, "{key}") {
			return nil, errors.New("lookup.url: must hold {key}, where the downstream key goes")
		}
		if err := checkURL(strings.ReplaceAll(l.URL, "{key}", "k")); err != nil {
			return nil, fmt.Errorf("lookup.url: %w", err)
		}
		if c.KeyHeader == "" && c.KeyField == "" {
			return nil, errors.New("lookup: needs call.key_header or call.key_field, or the downstream never learns the key it is looked up by")
		}
		if l.FoundStatus != 0 && (l.FoundStatus < 200 || l.FoundStatus > 299) {
			return nil, fmt.Errorf("lookup.found_status: %d is not a 2xx status (what the call answers when it succeeds)", l.FoundStatus)
		}
		if l.Headers != nil {
			if t.lookupHeaders, err = resolveHeaders("lookup.headers", l.Headers, getenv); err != nil {
				return nil, err
			}
		}
	}
	switch {
	case spec.AtMostOnce && (c.KeyHeader != "" || spec.Lookup != nil):
		return nil, errors.New("at_most_once: is for a tool with neither call.key_header nor lookup; with either, an unknown outcome is settled safely instead")
	case !spec.AtMostOnce && c.KeyHeader == "" && spec.Lookup == nil:
		return nil, errors.New("call.key_header, lookup: a tool needs one of them, so that an attempt whose answer was lost can be retried safely; " +
			"or set at_most_once: true to end such an attempt with outcome-unknown and never resend it")
	}
	schema, err := json.Marshal(spec.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("input_schema: %w", err)
	}
	t.Op, err = op.DefineJSON(op.JSONSpec{
		Name:        spec.Name,
		Description: spec.Description,
		Schema:      schema,
		Intent:      spec.Intent,
		Summary:     spec.Name + ": " + c.Method + " " + c.URL,
		Route:       RoutePrefix + spec.Name,
		BizType:     BizPrefix + spec.Name,
		Scope:       BizPrefix + spec.Name,
		Workflow:    Workflow,
		Activity:    Activity,
		Table:       Table,
		Lookup:      recall,
		Rejections: map[string]string{
			CodeRejected:       "The downstream service rejected the call (a 4xx answer): nothing happened there. The answer is the service's own.",
			CodeOutcomeUnknown: "The call got no answer that says whether it took effect, and it may not be sent again: it is at_most_once, or the downstream refused the request sent again under the same key. It is never sent again under this key.",
		},
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an absolute http or https URL", raw)
	}
	return nil
}

// resolveHeaders fills in the ${VAR}s. A missing variable is named in the
// error; its value never is, nor any header's.
func resolveHeaders(field string, in map[string]string, getenv func(string) (string, bool)) (http.Header, error) {
	out := http.Header{}
	for name, v := range in {
		if !headerName.MatchString(name) {
			return nil, fmt.Errorf("%s: %q is not an HTTP header name", field, name)
		}
		var missing []string
		val := envRef.ReplaceAllStringFunc(v, func(ref string) string {
			name := envRef.FindStringSubmatch(ref)[1]
			if !envName.MatchString(name) {
				missing = append(missing, fmt.Sprintf("%q is not a variable name", name))
				return ""
			}
			got, ok := getenv(name)
			if !ok {
				missing = append(missing, "$"+name+" is not set")
			}
			return got
		})
		if len(missing) > 0 {
			return nil, fmt.Errorf("%s.%s: %s", field, name, strings.Join(missing, ", "))
		}
		if strings.ContainsAny(val, "\r\n") {
			return nil, fmt.Errorf("%s.%s: the value holds a line break", field, name)
		}
		out.Set(name, val)
	}
	return out, nil
}

// Operations are the tools' operations, in the file's order.
func (s *Set) Operations() []*op.Operation {
	if s == nil {
		return nil
	}
	out := make([]*op.Operation, len(s.tools))
	for i, t := range s.tools {
		out[i] = t.Op
	}
	return out
}

// Of returns the tool of a business type.
func (s *Set) Of(bizType string) (*Tool, bool) {
	if s == nil {
		return nil, false
	}
	t, ok := s.byBiz[bizType]
	return t, ok
}

// Tools lists the tools, in the file's order.
func (s *Set) Tools() []*Tool {
	if s == nil {
		return nil
	}
	return s.tools
}

// Timeout bounds each of the tool's requests.
func (t *Tool) Timeout() time.Duration { return t.timeout }

// AtMostOnce: an unknown outcome is final.
func (t *Tool) AtMostOnce() bool { return t.spec.AtMostOnce }

// HasLookup: the tool's effects can be looked up by key.
func (t *Tool) HasLookup() bool { return t.spec.Lookup != nil }

// Resends: the downstream deduplicates by the key header, so a call may be
// sent again as it is.
func (t *Tool) Resends() bool { return t.spec.Call.KeyHeader != "" }

// Mode names how the tool settles an unknown outcome, for logs and docs.
func (t *Tool) Mode() string {
	var m []string
	if t.Resends() {
		m = append(m, "key_header")
	}
	if t.HasLookup() {
		m = append(m, "lookup")
	}
	if t.AtMostOnce() {
		m = append(m, "at_most_once")
	}
	return strings.Join(m, "+")
}

// String names the tool, never its secrets.
func (t *Tool) String() string { return "tool " + t.Name }
