package wiring

import (
	"github.com/rs/zerolog"

	"github.com/nqd-dev/nqd/auth"
	"github.com/nqd-dev/nqd/config"
)

// TriggerSigner signs the trigger ids the engine hands out with the
// configured keys. Without keys it signs with a key of this process alone:
// pending trigger ids then stop working after a restart and on other
// instances, so it says so once.
func TriggerSigner(cfg config.Config, log zerolog.Logger) (*auth.TriggerSigner, error) {
	keys := cfg.TriggerKeys
	if len(keys) == 0 {
		log.Warn().Msg("NQ_TRIGGER_KEYS is not set: trigger ids are signed with a key of this process and die with it")
		keys = []auth.Key{auth.RandomKey()}
	}
	return auth.NewTriggerSigner(keys...)
}
