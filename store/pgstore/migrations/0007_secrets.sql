-- nqd_secret holds secrets nqd makes for itself and every instance shares,
-- such as the key that signs trigger ids. A row is written once, by the
-- first instance that needs it, and never changed.
CREATE TABLE nqd_secret (
    name  text PRIMARY KEY,
    value text NOT NULL
);
