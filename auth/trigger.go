package auth

import (
	"crypto/hmac"
	"errors"
	"strconv"
	"strings"
	"time"
)

// triggerIDVersion starts every trigger id, so that a later format can be
// told apart.
const triggerIDVersion = "tg1"

// TriggerSigner issues and verifies trigger ids: the capability a webhook
// caller holds instead of an API token. An id is
// tg1.<key id>.<expiry>.<nonce>.<mac>, a valid context id (so it names the
// trigger's stream) of at most 90 characters.
type TriggerSigner struct {
	keys map[string][]byte
	sign Key
}

// NewTriggerSigner signs with keys[0] and verifies with any of keys, so a
// new key can be put first while ids signed with the old one are pending.
func NewTriggerSigner(keys ...Key) (*TriggerSigner, error) {
	if len(keys) == 0 {
		return nil, errors.New("auth: a trigger signer needs a key")
	}
	s := &TriggerSigner{keys: map[string][]byte{}, sign: keys[0]}
	for _, k := range keys {
		s.keys[k.ID] = k.secret
	}
	return s, nil
}

// Issue returns the id of the trigger named by seed (e.g. run, step and
// await number) that expires at expires. The nonce is derived from seed
// under the signing key: the same seed and expiry give the same id, so a
// registration retried after a lost race names the same trigger, while
// nobody without the key can guess an id.
func (s *TriggerSigner) Issue(seed string, expires time.Time) string {
	nonce := mac(s.sign.secret, "trigger-nonce\x00"+seed)[:16]
	head := triggerIDVersion + "." + s.sign.ID + "." + strconv.FormatInt(expires.UnixMilli(), 36) + "." + b64.EncodeToString(nonce)
	return head + "." + b64.EncodeToString(mac(s.sign.secret, head)[:16])
}

// Verify checks id's signature and expiry at now and returns the expiry.
// It fails with ErrInvalidToken (malformed, unknown key or bad signature)
// or ErrExpired.
func (s *TriggerSigner) Verify(id string, now time.Time) (time.Time, error) {
	parts := strings.Split(id, ".")
	if len(parts) != 5 || parts[0] != triggerIDVersion {
		return time.Time{}, ErrInvalidToken
	}
	secret, ok := s.keys[parts[1]]
	if !ok {
		return time.Time{}, ErrInvalidToken
	}
	// The signature is compared in its encoded form: any other spelling of
	// the same bytes (the decoder skips \r and \n, for one) would name
	// another stream with a valid signature.
	want := b64.EncodeToString(mac(secret, strings.Join(parts[:4], "."))[:16])
	if !hmac.Equal([]byte(want), []byte(parts[4])) {
		return time.Time{}, ErrInvalidToken
	}
	ms, err := strconv.ParseInt(parts[2], 36, 64)
	if err != nil {
		return time.Time{}, ErrInvalidToken
	}
	exp := time.UnixMilli(ms)
	if !now.Before(exp) {
		return exp, ErrExpired
	}
	return exp, nil
}

// LooksLikeTriggerID reports whether id has a trigger id's shape, so that
// an id of no trigger (unknown, 404) is told from a tampered one (401).
func LooksLikeTriggerID(id string) bool {
	return strings.HasPrefix(id, triggerIDVersion+".") && strings.Count(id, ".") == 4
}
