INSERT INTO nqd_events (ctx, ms, seq, kind, body)
SELECT $1, ms, seq, kind, body
FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::bytea[]) AS e(ms, seq, kind, body)
