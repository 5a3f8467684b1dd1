-- Marks a kind entry consumed by run $4. Of many waiters one takes an event:
-- an entry another run consumed is a conflict ($5 names it); one that is
-- gone is not.
WITH consumed AS (
    UPDATE nqd_kind_events SET consumed_by = $4
    WHERE kind = $1 AND ms = $2 AND seq = $3 AND consumed_by IS NULL
    RETURNING 1
)
SELECT nqd_require(
    EXISTS (SELECT 1 FROM consumed)
    OR NOT EXISTS (SELECT 1 FROM nqd_kind_events WHERE kind = $1 AND ms = $2 AND seq = $3),
    $5)
