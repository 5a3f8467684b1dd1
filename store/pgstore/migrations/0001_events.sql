-- Streams: one row per context, locked by every append to it so that the
-- context's ids stay monotonic while appends to other contexts run alongside.
CREATE TABLE nqd_streams (
    ctx      text COLLATE "C" PRIMARY KEY,          -- '<type>:<id>'
    last_ms  bigint NOT NULL DEFAULT 0,   -- the newest id ever assigned
    last_seq bigint NOT NULL DEFAULT 0,
    length   bigint NOT NULL DEFAULT 0
);

-- Events: the body is event.MarshalBody(); the kind is repeated for filters.
CREATE TABLE nqd_events (
    ctx  text   NOT NULL,
    ms   bigint NOT NULL,
    seq  bigint NOT NULL,
    kind text   NOT NULL,
    body bytea  NOT NULL,
    PRIMARY KEY (ctx, ms, seq)
);

-- Sorted indexes of context ids; a member keeps its first score.
CREATE TABLE nqd_index (
    ix     text   NOT NULL,               -- '<type>' or '<type>:<name>'
    member text COLLATE "C" NOT NULL,
    score  bigint NOT NULL,
    PRIMARY KEY (ix, member)
);
CREATE INDEX nqd_index_order ON nqd_index (ix, score DESC, member);

-- Idempotency records: the ids an append stored, remembered until expiry.
CREATE TABLE nqd_idempotency (
    ctx       text   NOT NULL,
    key       text   NOT NULL,
    expires   bigint NOT NULL,            -- epoch ms
    first_ms  bigint NOT NULL,
    first_seq bigint NOT NULL,
    last_ms   bigint NOT NULL,
    last_seq  bigint NOT NULL,
    count     int    NOT NULL,
    PRIMARY KEY (ctx, key)
);
CREATE INDEX nqd_idempotency_expires ON nqd_idempotency (expires);

-- Checkpoints: reduced states beside a stream, the newest few per context.
CREATE TABLE nqd_checkpoints (
    ctx   text   NOT NULL,
    ms    bigint NOT NULL,
    seq   bigint NOT NULL,
    state bytea  NOT NULL,
    PRIMARY KEY (ctx, ms, seq)
);
