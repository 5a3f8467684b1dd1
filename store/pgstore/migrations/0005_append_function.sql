-- nqd_append stores one batch at the end of a context's stream in a single
-- call, so an append is one statement (its own transaction when called
-- alone) and one round trip: the stream row lock, ids from the database
-- clock, the events, the indexes, the idempotency record, the kind index and
-- the NOTIFY. Any error rolls all of it back: a batch is stored whole or not
-- at all. Released migrations are never edited: a later change to the
-- function is a new migration with CREATE OR REPLACE.
--
-- Arguments:
--   p_ctx, p_ctx_type, p_ctx_id  the context: '<type>:<id>', its type, its id
--   p_kinds, p_bodies            the events' kinds and records, in order
--   p_ix                         per event, the index its context joins
--                                ('flow:<name>', 'trigger'), or ''
--   p_key, p_fp, p_same          the idempotency key ('' for none), the
--                                bodies' fingerprint, and whether a key met
--                                with other events is refused (SQLSTATE
--                                NQ001) rather than replayed
--   p_idem_ms                    how long the key is remembered
--   p_channel                    the NOTIFY channel
--   p_by_kind                    record events of watched kinds
--   p_kind_ms, p_kind_trim       the kind index's window, and how many
--                                expired entries of a kind one call removes
--
-- Rows: the batch's ids (r_replayed false, r_body NULL), or, for a key seen
-- within its window whose events are all still stored, those events
-- (r_replayed true) and nothing written.
CREATE FUNCTION nqd_append(
    p_ctx text, p_ctx_type text, p_ctx_id text,
    p_kinds text[], p_bodies bytea[], p_ix text[],
    p_key text, p_fp bytea, p_same boolean, p_idem_ms bigint,
    p_channel text,
    p_by_kind boolean, p_kind_ms bigint, p_kind_trim int
) RETURNS TABLE (r_replayed boolean, r_ms bigint, r_seq bigint, r_body bytea)
LANGUAGE plpgsql AS $fn$
DECLARE
    max_seq    constant bigint := 9223372036854775807;
    n          int := cardinality(p_kinds);
    v_last_ms  bigint;
    v_last_seq bigint;
    v_len      bigint;
    v_now      bigint;
    cur_ms     bigint;
    cur_seq    bigint;
    ids_ms     bigint[] := '{}';
    ids_seq    bigint[] := '{}';
    idem       record;
    k          record;
BEGIN
    IF n IS NULL OR n = 0 OR cardinality(p_bodies) <> n OR cardinality(p_ix) <> n THEN
        RAISE EXCEPTION 'nqd_append: % kinds, % bodies, % index keys', n, cardinality(p_bodies), cardinality(p_ix)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Appends to one context queue here; the clock is read once the lock
    -- is held, so ids follow commit order.
    INSERT INTO nqd_streams AS s (ctx) VALUES (p_ctx)
    ON CONFLICT (ctx) DO UPDATE SET length = s.length
    RETURNING s.last_ms, s.last_seq, s.length INTO v_last_ms, v_last_seq, v_len;
    v_now := greatest((extract(epoch FROM clock_timestamp()) * 1000)::bigint, 0);

    IF p_key <> '' THEN
        -- Under the stream lock, so a concurrent repeat of the same key
        -- waits for the first and then replays it.
        SELECT d.first_ms, d.first_seq, d.last_ms, d.last_seq, d.count, d.fingerprint INTO idem
        FROM nqd_idempotency d
        WHERE d.ctx = p_ctx AND d.key = p_key AND d.expires > v_now;
        IF FOUND AND (SELECT count(*) FROM nqd_events e
                      WHERE e.ctx = p_ctx AND (e.ms, e.seq) >= (idem.first_ms, idem.first_seq)
                        AND (e.ms, e.seq) <= (idem.last_ms, idem.last_seq)) = idem.count THEN
            IF p_same AND idem.fingerprint IS NOT NULL AND idem.fingerprint <> p_fp THEN
                RAISE EXCEPTION 'idempotency key reused for other events' USING ERRCODE = 'NQ001';
            END IF;
            RETURN QUERY
                SELECT true, e.ms, e.seq, e.body FROM nqd_events e
                WHERE e.ctx = p_ctx AND (e.ms, e.seq) >= (idem.first_ms, idem.first_seq)
                  AND (e.ms, e.seq) <= (idem.last_ms, idem.last_seq)
                ORDER BY e.ms, e.seq;
            RETURN;
        END IF;
        -- Otherwise some events are gone, or the key is new: append anew.
    END IF;

    -- The clock may step back; the stream's ids may not.
    IF v_now > v_last_ms THEN
        cur_ms := v_now; cur_seq := 0;
    ELSIF v_last_seq = max_seq THEN
        cur_ms := v_last_ms + 1; cur_seq := 0;
    ELSE
        cur_ms := v_last_ms; cur_seq := v_last_seq + 1;
    END IF;
    FOR i IN 1..n LOOP
        ids_ms := ids_ms || cur_ms;
        ids_seq := ids_seq || cur_seq;
        IF cur_seq = max_seq THEN
            cur_ms := cur_ms + 1; cur_seq := 0;
        ELSE
            cur_seq := cur_seq + 1;
        END IF;
    END LOOP;

    INSERT INTO nqd_events (ctx, ms, seq, kind, body)
    SELECT p_ctx, e.ms, e.seq, e.kind, e.body
    FROM unnest(ids_ms, ids_seq, p_kinds, p_bodies) AS e(ms, seq, kind, body);
    UPDATE nqd_streams SET last_ms = ids_ms[n], last_seq = ids_seq[n], length = nqd_streams.length + n
    WHERE ctx = p_ctx;

    -- A context joins its type's index with its first event, and the
    -- indexes its events name; a member keeps its first score.
    IF v_len = 0 THEN
        INSERT INTO nqd_index (ix, member, score) VALUES (p_ctx_type, p_ctx_id, ids_ms[1])
        ON CONFLICT (ix, member) DO NOTHING;
    END IF;
    INSERT INTO nqd_index (ix, member, score)
    SELECT DISTINCT ON (x.ix) x.ix, p_ctx_id, x.ms
    FROM unnest(p_ix, ids_ms) AS x(ix, ms)
    WHERE x.ix <> ''
    ORDER BY x.ix, x.ms
    ON CONFLICT (ix, member) DO NOTHING;

    IF p_key <> '' THEN
        -- A bounded sweep, so cleaning never makes one append slow.
        DELETE FROM nqd_idempotency WHERE (ctx, key) IN (
            SELECT d.ctx, d.key FROM nqd_idempotency d WHERE d.expires <= v_now LIMIT 64);
        INSERT INTO nqd_idempotency AS d (ctx, key, expires, first_ms, first_seq, last_ms, last_seq, count, fingerprint)
        VALUES (p_ctx, p_key, v_now + p_idem_ms, ids_ms[1], ids_seq[1], ids_ms[n], ids_seq[n], n, p_fp)
        ON CONFLICT (ctx, key) DO UPDATE SET
            expires = EXCLUDED.expires, first_ms = EXCLUDED.first_ms, first_seq = EXCLUDED.first_seq,
            last_ms = EXCLUDED.last_ms, last_seq = EXCLUDED.last_seq, count = EXCLUDED.count,
            fingerprint = EXCLUDED.fingerprint;
    END IF;

    IF p_by_kind THEN
        -- Watched kinds are locked in name order, the same in every call,
        -- so two appends never wait on each other's kinds; the lock makes a
        -- kind's positions follow commit order, so a reader's cursor never
        -- skips an entry that commits late.
        FOR k IN
            SELECT w.kind, w.last_ms, w.last_seq FROM nqd_watched_kinds w
            WHERE w.kind = ANY (p_kinds) ORDER BY w.kind FOR UPDATE
        LOOP
            cur_ms := k.last_ms; cur_seq := k.last_seq;
            FOR i IN 1..n LOOP
                CONTINUE WHEN p_kinds[i] <> k.kind;
                IF v_now > cur_ms THEN
                    cur_ms := v_now; cur_seq := 0;
                ELSIF cur_seq = max_seq THEN
                    cur_ms := cur_ms + 1; cur_seq := 0;
                ELSE
                    cur_seq := cur_seq + 1;
                END IF;
                INSERT INTO nqd_kind_events (kind, ms, seq, ctx_type, ctx_id, ev_ms, ev_seq, body)
                VALUES (k.kind, cur_ms, cur_seq, p_ctx_type, p_ctx_id, ids_ms[i], ids_seq[i], p_bodies[i]);
            END LOOP;
            UPDATE nqd_watched_kinds SET last_ms = cur_ms, last_seq = cur_seq WHERE kind = k.kind;
            DELETE FROM nqd_kind_events WHERE kind = k.kind AND (ms, seq) IN (
                SELECT ke.ms, ke.seq FROM nqd_kind_events ke
                WHERE ke.kind = k.kind AND ke.ms + p_kind_ms < v_now
                ORDER BY ke.ms, ke.seq LIMIT p_kind_trim);
        END LOOP;
    END IF;

    -- Delivered on commit: the context and its newest id, never bodies.
    PERFORM pg_notify(p_channel, p_ctx || ' ' || ids_ms[n] || '-' || ids_seq[n]);

    RETURN QUERY SELECT false, x.ms, x.seq, NULL::bytea FROM unnest(ids_ms, ids_seq) AS x(ms, seq);
END
$fn$;
