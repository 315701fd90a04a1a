package oauth

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// introspect asks the issuer about an opaque token (RFC 7662). Nothing is
// cached: a revoked token is refused at its next request.
func (v *Verifier) introspect(ctx context.Context, token string) (Principal, error) {
	form := url.Values{"token": {token}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.cfg.IntrospectionURL, strings.NewReader(form.Encode()))
	if err != nil {
		return Principal{}, &UnavailableError{Err: err}
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if v.cfg.IntrospectionClientID != "" {
		req.SetBasicAuth(url.QueryEscape(v.cfg.IntrospectionClientID), url.QueryEscape(v.cfg.IntrospectionSecret))
	}
	resp, err := v.cfg.HTTP.Do(req)
	if err != nil {
		return Principal{}, &UnavailableError{Err: fmt.Errorf("introspection: %w", err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Principal{}, &UnavailableError{Err: fmt.Errorf("introspection: HTTP %d", resp.StatusCode)}
	}
	claims := map[string]any{}
	dec := json.NewDecoder(io.LimitReader(resp.Body, 1<<20))
	dec.UseNumber()
	if err := dec.Decode(&claims); err != nil {
		return Principal{}, &UnavailableError{Err: fmt.Errorf("introspection: %w", err)}
	}
	if active, _ := claims["active"].(bool); !active {
		return Principal{}, invalid("the issuer says the token is not active (revoked, expired or unknown)")
	}
	if tt, ok := claims["token_type"].(string); ok && tt != "" && !strings.EqualFold(tt, "access_token") && !strings.EqualFold(tt, "bearer") {
		return Principal{}, invalid("the token is a %s, not an access token", tt)
	}
	if iss, ok := claims["iss"].(string); ok && strings.TrimRight(iss, "/") != strings.TrimRight(v.cfg.Issuer, "/") {
		return Principal{}, invalid("the token's issuer %q is not %q", iss, v.cfg.Issuer)
	}
	var aud []string
	switch a := claims["aud"].(type) {
	case string:
		aud = []string{a}
	case []any:
		for _, x := range a {
			if s, ok := x.(string); ok {
				aud = append(aud, s)
			}
		}
	}
	if !slices.Contains(aud, v.cfg.Resource) {
		return Principal{}, invalid("the token was issued for %q, not for this resource (%s)", aud, v.cfg.Resource)
	}
	// The issuer said active; exp and nbf are checked again here, with
	// the same skew as a JWT's, in case its clock and ours disagree.
	now := v.cfg.Now()
	if exp, ok := numericDate(claims["exp"]); ok && now.After(exp.Add(v.cfg.ClockSkew)) {
		return Principal{}, invalid("the token expired at %s", exp.UTC().Format(time.RFC3339))
	}
	if nbf, ok := numericDate(claims["nbf"]); ok && now.Add(v.cfg.ClockSkew).Before(nbf) {
		return Principal{}, invalid("the token is not valid before %s", nbf.UTC().Format(time.RFC3339))
	}
	return v.principal(claims)
}

func numericDate(x any) (time.Time, bool) {
	n, ok := x.(json.Number)
	if !ok {
		return time.Time{}, false
	}
	f, err := n.Float64()
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(int64(f), 0), true
}
