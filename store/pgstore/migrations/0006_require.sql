-- nqd_require raises SQLSTATE NQ409 with message when ok is false. A run
-- update is one pipeline of statements in one implicit transaction (one
-- round trip); a check that fails (the run's version moved, the job's lease
-- is not held, the kind entry is taken) raises, so the server rolls back
-- what the pipeline wrote before it and skips what follows.
CREATE FUNCTION nqd_require(ok boolean, message text) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    IF NOT ok THEN
        RAISE EXCEPTION '%', message USING ERRCODE = 'NQ409';
    END IF;
END
$fn$;
