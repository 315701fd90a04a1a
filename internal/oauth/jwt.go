package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// verifyJWT checks a JWT access token's signature against the issuer's
// keys, then its iss, aud, exp and nbf.
func (v *Verifier) verifyJWT(ctx context.Context, token string) (Principal, error) {
	// The allow-list is given to the parser: a token signed with any
	// other algorithm (none, an HMAC keyed by a public key) is refused
	// before any key is looked at.
	tok, err := jwt.ParseSigned(token, v.algs)
	if err != nil {
		return Principal{}, invalid("%v", err)
	}
	if len(tok.Headers) != 1 {
		return Principal{}, invalid("want one signature, got %d", len(tok.Headers))
	}
	key, err := v.keys.find(ctx, tok.Headers[0].KeyID)
	if err != nil {
		return Principal{}, err
	}
	if alg := tok.Headers[0].Algorithm; key.Algorithm != "" && key.Algorithm != alg {
		return Principal{}, invalid("the token is signed with %s; its key %q is for %s", alg, key.KeyID, key.Algorithm)
	}
	var std jwt.Claims
	custom := map[string]any{}
	if err := tok.Claims(key.Key, &std, &custom); err != nil {
		return Principal{}, invalid("the signature does not verify: %v", err)
	}
	if std.Expiry == nil {
		return Principal{}, invalid("the token has no exp")
	}
	err = std.ValidateWithLeeway(jwt.Expected{Issuer: v.cfg.Issuer, AnyAudience: jwt.Audience{v.cfg.Resource}, Time: v.cfg.Now()}, v.cfg.ClockSkew)
	switch {
	case errors.Is(err, jwt.ErrExpired):
		return Principal{}, invalid("the token expired at %s", std.Expiry.Time().UTC().Format(time.RFC3339))
	case errors.Is(err, jwt.ErrNotValidYet):
		return Principal{}, invalid("the token is not valid before %s", std.NotBefore.Time().UTC().Format(time.RFC3339))
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return Principal{}, invalid("the token's issuer %q is not %q", std.Issuer, v.cfg.Issuer)
	case errors.Is(err, jwt.ErrInvalidAudience):
		return Principal{}, invalid("the token was issued for %q, not for this resource (%s)", []string(std.Audience), v.cfg.Resource)
	case err != nil:
		return Principal{}, invalid("%v", err)
	}
	return v.principal(custom)
}

// keySet caches the issuer's JWKS.
type keySet struct {
	v         *Verifier
	mu        sync.Mutex
	keys      *jose.JSONWebKeySet
	fetched   time.Time // the last fetch that answered
	attempted time.Time // the last fetch, answered or not
}

// find returns the key a token names. Keys are fetched when none are
// held, when they are older than KeysMaxAge, or when the kid is unknown
// (at most once per KeysMinRefresh, so that tokens with made-up kids
// cannot flood the issuer). A failed fetch keeps the keys held while
// they are younger than KeysMaxAge+KeysGrace.
func (s *keySet) find(ctx context.Context, kid string) (jose.JSONWebKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.v.cfg.Now()
	lookup := func() (jose.JSONWebKey, bool) {
		if s.keys == nil {
			return jose.JSONWebKey{}, false
		}
		for _, k := range s.keys.Keys {
			if (kid == "" || k.KeyID == kid) && k.Use != "enc" && k.IsPublic() {
				return k, true
			}
		}
		return jose.JSONWebKey{}, false
	}
	k, found := lookup()
	stale := s.keys == nil || now.Sub(s.fetched) >= s.v.cfg.KeysMaxAge
	mayRefresh := s.attempted.IsZero() || now.Sub(s.attempted) >= s.v.cfg.KeysMinRefresh
	if stale || (!found && mayRefresh) {
		s.attempted = now
		keys, err := s.fetch(ctx)
		switch {
		case err == nil:
			s.keys, s.fetched = keys, now
			k, found = lookup()
		case s.keys != nil && now.Sub(s.fetched) < s.v.cfg.KeysMaxAge+s.v.cfg.KeysGrace:
			// The endpoint is down: the keys held stand, within the grace.
		default:
			return jose.JSONWebKey{}, &UnavailableError{Err: fmt.Errorf("the issuer's keys: %w", err)}
		}
	}
	if !found {
		return jose.JSONWebKey{}, invalid("no key %q among the issuer's signing keys", kid)
	}
	return k, nil
}

func (s *keySet) fetch(ctx context.Context) (*jose.JSONWebKeySet, error) {
	uri, err := s.v.meta.jwksURI(ctx)
	if err != nil {
		return nil, err
	}
	var set jose.JSONWebKeySet
	if err := getJSON(ctx, s.v.cfg.HTTP, uri, &set); err != nil {
		return nil, err
	}
	return &set, nil
}

// discovery finds the issuer's JWKS URI once.
type discovery struct {
	issuer string
	http   *http.Client
	mu     sync.Mutex
	jwks   string
}

func (d *discovery) jwksURI(ctx context.Context) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.jwks != "" {
		return d.jwks, nil
	}
	base := strings.TrimRight(d.issuer, "/")
	var errs []error
	for _, u := range []string{base + "/.well-known/oauth-authorization-server", base + "/.well-known/openid-configuration"} {
		var meta struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := getJSON(ctx, d.http, u, &meta); err != nil {
			errs = append(errs, err)
			continue
		}
		// RFC 8414 §3.3: the document must name the issuer it was asked for.
		if strings.TrimRight(meta.Issuer, "/") != base || meta.JWKSURI == "" {
			errs = append(errs, fmt.Errorf("%s names issuer %q and jwks_uri %q", u, meta.Issuer, meta.JWKSURI))
			continue
		}
		d.jwks = meta.JWKSURI
		return d.jwks, nil
	}
	return "", fmt.Errorf("discover the issuer's keys: %w", errors.Join(errs...))
}

func getJSON(ctx context.Context, hc *http.Client, url string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(into); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}
