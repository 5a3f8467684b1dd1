package wiring

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/config"
)

// The names of the keys among a store's secrets; on the embedded store
// each is a file <name>.key beside the data.
const (
	triggerKeyName     = "trigger"
	streamTokenKeyName = "stream-token"
)

// secretKeeper keeps the secrets nqd makes for itself where every instance
// of one store finds them: Secret returns the one stored under name,
// storing fresh first when there is none, and never replaces it (a replaced
// trigger key would void every trigger id handed out with it).
type secretKeeper interface {
	Secret(ctx context.Context, name, fresh string) (string, error)
}

// TriggerSigner signs the trigger ids the engine hands out with the
// configured keys. Without keys it uses the key kept in the store, made by
// the first instance that needed one, so that a pending trigger fires on
// any instance and after restarts.
func TriggerSigner(ctx context.Context, cfg config.Config, secrets secretKeeper) (*auth.TriggerSigner, error) {
	if len(cfg.TriggerKeys) > 0 {
		return auth.NewTriggerSigner(cfg.TriggerKeys...)
	}
	k, err := keptKey(ctx, secrets, triggerKeyName, keptKeyID(cfg))
	if err != nil {
		return nil, fmt.Errorf("trigger key: %w", err)
	}
	return auth.NewTriggerSigner(k)
}

// keptKeyID is the id of a key the store keeps, which shows in what it
// signs (tg1.<id>.… for a trigger id): where the key lives.
func keptKeyID(cfg config.Config) string {
	if cfg.Backend() == "embedded" {
		return "local"
	}
	return "store"
}

// keptKey is the `id:secret` key secrets keeps under name, a new random one
// with id the first time.
func keptKey(ctx context.Context, secrets secretKeeper, name, id string) (auth.Key, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return auth.Key{}, err
	}
	text, err := secrets.Secret(ctx, name, id+":"+hex.EncodeToString(b))
	if err != nil {
		return auth.Key{}, err
	}
	keys, err := auth.ParseKeys(strings.TrimSpace(text))
	if err != nil || len(keys) != 1 {
		return auth.Key{}, fmt.Errorf("the stored %s key is not one id:secret key", name)
	}
	return keys[0], nil
}

// dirSecrets keeps the embedded store's secrets beside its data, one file
// <name>.key each, readable by this user only.
type dirSecrets string

func (d dirSecrets) Secret(_ context.Context, name, fresh string) (string, error) {
	path := filepath.Join(string(d), name+".key")
	b, err := os.ReadFile(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return string(b), err
	}
	// O_EXCL: a secret once written is never replaced.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(fresh + "\n"); err != nil {
		_ = f.Close()
		return "", err
	}
	return fresh, f.Close()
}
