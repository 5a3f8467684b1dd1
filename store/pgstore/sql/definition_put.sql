INSERT INTO nqd_definitions (name, body) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET body = EXCLUDED.body
