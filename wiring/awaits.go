package wiring

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/config"
)

// triggerKeyFile holds the embedded store's trigger key, beside its data.
const triggerKeyFile = "trigger.key"

// TriggerSigner signs the trigger ids the engine hands out with the
// configured keys. Without keys, the embedded store keeps a key of its own in
// its data directory, so pending triggers survive restarts; on Redis a key of
// this process alone would break them on a restart and on other instances,
// so it says so.
func TriggerSigner(cfg config.Config, log zerolog.Logger) (*auth.TriggerSigner, error) {
	keys := cfg.TriggerKeys
	switch {
	case len(keys) > 0:
	case cfg.Backend() == "embedded":
		k, err := loadOrCreateKey(filepath.Join(cfg.DataDir, triggerKeyFile))
		if err != nil {
			return nil, fmt.Errorf("trigger key: %w", err)
		}
		keys = []auth.Key{k}
	default:
		log.Warn().Msg("NQ_TRIGGER_KEYS is not set: trigger ids are signed with a key of this process, so they stop working after a restart and on other instances")
		keys = []auth.Key{auth.RandomKey()}
	}
	return auth.NewTriggerSigner(keys...)
}

// loadOrCreateKey reads the `id:secret` key at path, writing a new random one
// (readable by this user only) the first time.
func loadOrCreateKey(path string) (auth.Key, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		secret := make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return auth.Key{}, err
		}
		b = []byte("local:" + hex.EncodeToString(secret) + "\n")
		// O_EXCL: a key once written is never replaced, which would void
		// every trigger id handed out with it.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return auth.Key{}, err
		}
		if _, err := f.Write(b); err != nil {
			_ = f.Close()
			return auth.Key{}, err
		}
		if err := f.Close(); err != nil {
			return auth.Key{}, err
		}
	} else if err != nil {
		return auth.Key{}, err
	}
	keys, err := auth.ParseKeys(strings.TrimSpace(string(b)))
	if err != nil || len(keys) != 1 {
		return auth.Key{}, fmt.Errorf("%s does not hold one id:secret key", path)
	}
	return keys[0], nil
}
