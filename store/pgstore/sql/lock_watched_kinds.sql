-- Locks the watched ones of the kinds $1 in name order, the same in every
-- transaction, so two appends never wait on each other's kinds.
SELECT kind, last_ms, last_seq FROM nqd_watched_kinds
WHERE kind = ANY($1)
ORDER BY kind
FOR UPDATE
