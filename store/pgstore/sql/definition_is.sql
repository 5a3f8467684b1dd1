-- Raises ($3) unless flow $1's stored definition is exactly $2: the copy a
-- start was decided on must still be the one every instance would read.
SELECT nqd_require(EXISTS (SELECT 1 FROM nqd_definitions WHERE name = $1 AND body = $2), $3)
