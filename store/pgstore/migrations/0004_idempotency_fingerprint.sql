-- The fingerprint (store.Fingerprint) of the events an idempotent append
-- stored, so a client's key reused for other events is refused. Records
-- written before hold none and replay whatever a repeat carries.
ALTER TABLE nqd_idempotency ADD COLUMN fingerprint bytea;
