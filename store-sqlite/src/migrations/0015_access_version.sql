-- A counter that every change of what authenticating a key reads (users, roles, API keys) moves,
-- in whichever process commits it (triggers): the key cache checks it once the database has
-- changed, instead of dropping every entry at every commit. Adding members, importing, sending
-- no longer empty it.
CREATE TABLE access_version (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    v  INTEGER NOT NULL
);
INSERT INTO access_version (id, v) VALUES (1, 0);
CREATE TRIGGER users_access_insert AFTER INSERT ON users BEGIN UPDATE access_version SET v = v + 1; END;
CREATE TRIGGER users_access_update AFTER UPDATE ON users BEGIN UPDATE access_version SET v = v + 1; END;
CREATE TRIGGER users_access_delete AFTER DELETE ON users BEGIN UPDATE access_version SET v = v + 1; END;
CREATE TRIGGER roles_access_insert AFTER INSERT ON roles BEGIN UPDATE access_version SET v = v + 1; END;
CREATE TRIGGER roles_access_update AFTER UPDATE ON roles BEGIN UPDATE access_version SET v = v + 1; END;
CREATE TRIGGER roles_access_delete AFTER DELETE ON roles BEGIN UPDATE access_version SET v = v + 1; END;
CREATE TRIGGER api_keys_access_insert AFTER INSERT ON api_keys BEGIN UPDATE access_version SET v = v + 1; END;
CREATE TRIGGER api_keys_access_update AFTER UPDATE ON api_keys BEGIN UPDATE access_version SET v = v + 1; END;
CREATE TRIGGER api_keys_access_delete AFTER DELETE ON api_keys BEGIN UPDATE access_version SET v = v + 1; END;
