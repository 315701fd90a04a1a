// Package modeltext checks the words idemflow hands a model after a
// refusal or a pending answer, by the rule every client's tests share
// (clients/testdata/modeltexts.json): none may invite the model to make
// the call again as a new one.
package modeltext

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
)

// Rule is clients/testdata/modeltexts.json, compiled.
type Rule struct {
	split       *regexp.Regexp
	invitations []*regexp.Regexp
	negation    *regexp.Regexp
	same        *regexp.Regexp
	// Invite and Allow are the file's examples of the check itself.
	Invite, Allow []string
}

// Load reads the rule from the repository's clients/testdata.
func Load() (*Rule, error) {
	_, here, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "..", "..", "clients", "testdata", "modeltexts.json"))
	if err != nil {
		return nil, fmt.Errorf("modeltext: %w", err)
	}
	var f struct {
		Split       string   `json:"split"`
		Invitations []string `json:"invitations"`
		Negation    string   `json:"negation"`
		Same        string   `json:"same"`
		Examples    struct {
			Invite []string `json:"invite"`
			Allow  []string `json:"allow"`
		} `json:"examples"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("modeltext: %w", err)
	}
	ci := func(p string) (*regexp.Regexp, error) { return regexp.Compile("(?i)" + p) }
	r := &Rule{Invite: f.Examples.Invite, Allow: f.Examples.Allow}
	if r.split, err = regexp.Compile(f.Split); err != nil {
		return nil, fmt.Errorf("modeltext: split: %w", err)
	}
	if r.negation, err = ci(f.Negation); err != nil {
		return nil, fmt.Errorf("modeltext: negation: %w", err)
	}
	if r.same, err = ci(f.Same); err != nil {
		return nil, fmt.Errorf("modeltext: same: %w", err)
	}
	for _, p := range f.Invitations {
		re, err := ci(p)
		if err != nil {
			return nil, fmt.Errorf("modeltext: %q: %w", p, err)
		}
		r.invitations = append(r.invitations, re)
	}
	return r, nil
}

// Invitation is the first sentence of text that invites a new call, or "".
func (r *Rule) Invitation(text string) string {
	for _, s := range r.split.Split(text, -1) {
		if r.negation.MatchString(s) || r.same.MatchString(s) {
			continue
		}
		for _, re := range r.invitations {
			if re.MatchString(s) {
				return s
			}
		}
	}
	return ""
}
