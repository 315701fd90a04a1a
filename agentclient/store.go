package agentclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Intent is one logical operation an agent wants done exactly once. Its
// Key is made once, stored before the first call, and sent on every retry,
// including retries after the agent restarts.
type Intent struct {
	// ID is the agent's own name for the intent (a tool call ID, a task
	// step): resuming by ID finds the stored key.
	ID     string          `json:"id"`
	Key    string          `json:"key"`
	Method string          `json:"method"`
	Path   string          `json:"path"`
	Body   json.RawMessage `json:"body,omitempty"`
	// ByIntent: the key was derived from the operation's intent fields
	// (a framework's call, package intent), so the gateway compares the
	// request on them alone (Idempotency-Fingerprint: intent): a re-run
	// whose model reworded free text gets the first answer.
	ByIntent bool `json:"by_intent,omitempty"`
	// Origin names one call of Do or Submit on each of its attempts
	// (Idempotency-Origin); empty, each call makes its own. It is not
	// stored: a call after a restart is another call, which reads the
	// first one's answer as a replay. A caller that carries one call
	// across requests (an MCP task naming its request) sets it.
	Origin string `json:"-"`
	// Result is set once the intent has its final answer.
	Result *Result `json:"result,omitempty"`
	// Refused is set when the last answer refused the request before the
	// server recorded anything (a 400 for the body, 413, 415): the same
	// key may then carry a corrected request (ReviseIntent).
	Refused   *Result   `json:"refused,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// ErrNoIntent: the store has no intent with that ID.
var ErrNoIntent = errors.New("no such intent")

// ErrIntentMismatch: NewIntent found an intent stored under that ID with
// another method, path or body. Sending the stored key with the new
// request would be refused as a reused key, and sending the stored request
// would not be what the caller asked for: the caller must choose.
var ErrIntentMismatch = errors.New("a different intent is stored under this ID")

// ErrNotRevisable: ReviseIntent was asked to change an intent the server
// may have recorded (it has a final answer, or was never refused as
// sent), so the same key with another request would be a reused key.
var ErrNotRevisable = errors.New("the intent cannot be revised")

// IntentStore keeps intents across agent restarts. Save must be durable
// when it returns: the key is only safe to send once it cannot be lost.
type IntentStore interface {
	Load(ctx context.Context, id string) (Intent, error)
	Save(ctx context.Context, in Intent) error
	Delete(ctx context.Context, id string) error
}

// MemoryStore keeps intents in memory: for tests and one-shot scripts
// only, since a restart loses the keys.
type MemoryStore struct {
	mu sync.Mutex
	m  map[string]Intent
}

// Load implements IntentStore.
func (s *MemoryStore) Load(_ context.Context, id string) (Intent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.m[id]
	if !ok {
		return Intent{}, ErrNoIntent
	}
	return in, nil
}

// Save implements IntentStore.
func (s *MemoryStore) Save(_ context.Context, in Intent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]Intent{}
	}
	s.m[in.ID] = in
	return nil
}

// Delete implements IntentStore.
func (s *MemoryStore) Delete(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
	return nil
}

// FileStore keeps one JSON file per intent in a directory, written to a
// temporary file, synced, renamed, and the directory synced, so a crash
// leaves the old file or the new one, never half of one, and a saved key
// survives a power loss.
type FileStore struct {
	Dir string

	// syncDir makes the rename durable; tests observe it.
	syncDir func(dir string) error
}

// path names an intent's file by the SHA-256 of its ID: IDs are the
// agent's, so they must neither name another path nor collide, and on a
// case-insensitive file system (macOS, Windows) an escaped ID would
// collide with one that differs only in case.
func (s FileStore) path(id string) string {
	sum := sha256.Sum256([]byte(id))
	return filepath.Join(s.Dir, hex.EncodeToString(sum[:])+".json")
}

// Load implements IntentStore.
func (s FileStore) Load(_ context.Context, id string) (Intent, error) {
	b, err := os.ReadFile(s.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return Intent{}, ErrNoIntent
	}
	if err != nil {
		return Intent{}, fmt.Errorf("load intent %s: %w", id, err)
	}
	var in Intent
	if err := json.Unmarshal(b, &in); err != nil {
		return Intent{}, fmt.Errorf("load intent %s: %w", id, err)
	}
	if in.ID != id {
		return Intent{}, fmt.Errorf("load intent %s: the file holds intent %q", id, in.ID)
	}
	return in, nil
}

// Save implements IntentStore.
func (s FileStore) Save(_ context.Context, in Intent) error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("save intent: %w", err)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("save intent: %w", err)
	}
	f, err := os.CreateTemp(s.Dir, ".intent-*")
	if err != nil {
		return fmt.Errorf("save intent: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("save intent: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("save intent: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("save intent: %w", err)
	}
	if err := os.Rename(f.Name(), s.path(in.ID)); err != nil {
		return fmt.Errorf("save intent: %w", err)
	}
	syncDir := s.syncDir
	if syncDir == nil {
		syncDir = fsyncDir
	}
	if err := syncDir(s.Dir); err != nil {
		return fmt.Errorf("save intent: %w", err)
	}
	return nil
}

// fsyncDir syncs a directory, so that a rename in it survives a crash.
func fsyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Delete implements IntentStore.
func (s FileStore) Delete(_ context.Context, id string) error {
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete intent %s: %w", id, err)
	}
	return nil
}

// PGStore keeps intents in the agent's PostgreSQL, in table agent_intent,
// which it owns and creates.
type PGStore struct {
	db *pgxpool.Pool
}

// NewPGStore creates agent_intent if needed.
func NewPGStore(ctx context.Context, db *pgxpool.Pool) (*PGStore, error) {
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS agent_intent (
		id         text PRIMARY KEY,
		intent     jsonb NOT NULL,
		created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("create agent_intent: %w", err)
	}
	return &PGStore{db: db}, nil
}

// Load implements IntentStore.
func (s *PGStore) Load(ctx context.Context, id string) (Intent, error) {
	var in Intent
	err := s.db.QueryRow(ctx, `SELECT intent FROM agent_intent WHERE id = $1`, id).Scan(&in)
	if errors.Is(err, pgx.ErrNoRows) {
		return Intent{}, ErrNoIntent
	}
	if err != nil {
		return Intent{}, fmt.Errorf("load intent %s: %w", id, err)
	}
	return in, nil
}

// Save implements IntentStore.
func (s *PGStore) Save(ctx context.Context, in Intent) error {
	if _, err := s.db.Exec(ctx, `INSERT INTO agent_intent (id, intent) VALUES ($1, $2)
		ON CONFLICT (id) DO UPDATE SET intent = EXCLUDED.intent`, in.ID, in); err != nil {
		return fmt.Errorf("save intent %s: %w", in.ID, err)
	}
	return nil
}

// Delete implements IntentStore.
func (s *PGStore) Delete(ctx context.Context, id string) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM agent_intent WHERE id = $1`, id); err != nil {
		return fmt.Errorf("delete intent %s: %w", id, err)
	}
	return nil
}
