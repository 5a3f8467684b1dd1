-- KV records: fields as a JSON object, a version counting writes since the
-- record was created, and an expiry in epoch ms on the database clock (0:
-- never). Version 0 marks a row an unfinished write holds, never a record.
CREATE TABLE nqd_kv (
    key     text COLLATE "C" PRIMARY KEY,
    version bigint NOT NULL,
    expires bigint NOT NULL,
    fields  bytea  NOT NULL
);
CREATE INDEX nqd_kv_expires ON nqd_kv (expires) WHERE expires > 0;
