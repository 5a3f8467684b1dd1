-- Flow definitions as JSON, by flow name.
CREATE TABLE nqd_definitions (
    name text COLLATE "C" PRIMARY KEY,
    body bytea NOT NULL
);

-- Run records (store.RunMeta as JSON) with the columns the engine selects on.
-- version is the optimistic lock: an update names the version it read.
CREATE TABLE nqd_runs (
    flow       text COLLATE "C" NOT NULL,
    run        text COLLATE "C" NOT NULL,
    status     text   NOT NULL,
    started_at bigint NOT NULL,
    version    bigint NOT NULL,
    expires_at bigint,                     -- epoch ms when retention ends; NULL keeps it
    meta       bytea  NOT NULL,
    PRIMARY KEY (flow, run)
);
CREATE INDEX nqd_runs_status ON nqd_runs (flow, status, started_at DESC, run);
CREATE INDEX nqd_runs_expiry ON nqd_runs (expires_at, flow, run) WHERE expires_at IS NOT NULL;

-- Jobs: one step of one run in a queue. score is the ready time, or the
-- lease end once claimed; a claim takes the lowest scores at or before now.
CREATE TABLE nqd_jobs (
    queue       text COLLATE "C" NOT NULL,
    id          text COLLATE "C" NOT NULL,
    flow        text   NOT NULL,
    run         text   NOT NULL,
    step        text   NOT NULL,
    input       bytea,
    attempt     int    NOT NULL,
    score       bigint NOT NULL,
    lease       text   NOT NULL DEFAULT '',
    lease_until bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, id)
);
CREATE INDEX nqd_jobs_ready ON nqd_jobs (queue, score, id);

-- Paused queues: a claim hands out nothing from these.
CREATE TABLE nqd_paused_queues (
    queue text COLLATE "C" PRIMARY KEY
);

-- Durable timers, one per (kind, flow, run, step).
CREATE TABLE nqd_timers (
    kind text COLLATE "C" NOT NULL,
    flow text COLLATE "C" NOT NULL,
    run  text COLLATE "C" NOT NULL,
    step text COLLATE "C" NOT NULL,
    due  bigint NOT NULL,
    PRIMARY KEY (kind, flow, run, step)
);
CREATE INDEX nqd_timers_due ON nqd_timers (due);

-- The kind index: watched kinds, each with the newest position it gave out
-- (its row is locked by every append that records the kind, so positions
-- follow commit order), and the recorded events.
CREATE TABLE nqd_watched_kinds (
    kind     text COLLATE "C" PRIMARY KEY,
    last_ms  bigint NOT NULL DEFAULT 0,
    last_seq bigint NOT NULL DEFAULT 0
);
CREATE TABLE nqd_kind_events (
    kind        text COLLATE "C" NOT NULL,
    ms          bigint NOT NULL,          -- the entry's position in its kind
    seq         bigint NOT NULL,
    ctx_type    text   NOT NULL,
    ctx_id      text   NOT NULL,
    ev_ms       bigint NOT NULL,          -- the event's id in its stream
    ev_seq      bigint NOT NULL,
    body        bytea  NOT NULL,
    consumed_by text,                     -- the run that consumed it
    PRIMARY KEY (kind, ms, seq)
);
