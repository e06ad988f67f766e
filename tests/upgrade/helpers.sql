-- Upgrade test helpers (scripts/upgrade_test.sh), in database "upgraded".
-- Schema upgrade_check holds everything the test owns: these helpers and the
-- snapshots. It is not part of the extension, and the schema comparison only
-- reads schema aedb_queue. The function bodies name aedb_queue objects only in
-- strings, so nothing here depends on the extension and no update is blocked.

CREATE SCHEMA upgrade_check;

-- Fails the test unless got equals want.
CREATE FUNCTION upgrade_check.expect(what text, got anycompatible, want anycompatible)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF got IS DISTINCT FROM want THEN
        RAISE EXCEPTION 'upgrade test: %: got %, want %', what, got, want;
    END IF;
END
$$;

-- The id of the one live task whose payload is {"label": label}.
CREATE FUNCTION upgrade_check.id_of(label text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    id bigint;
BEGIN
    EXECUTE 'SELECT task_id FROM aedb_queue.task WHERE payload->>''label'' = $1' INTO STRICT id USING label;
    RETURN id;
EXCEPTION WHEN no_data_found OR too_many_rows THEN
    RAISE EXCEPTION 'upgrade test: expected exactly one task labelled %', label;
END
$$;

-- Its current fencing token.
CREATE FUNCTION upgrade_check.token_of(label text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    token bigint;
BEGIN
    EXECUTE 'SELECT fencing_token FROM aedb_queue.task WHERE task_id = $1'
        INTO STRICT token USING upgrade_check.id_of(label);
    RETURN token;
END
$$;

-- Fails the test, listing the differing rows, unless the two tables hold the
-- same rows (as multisets: EXCEPT ALL both ways).
CREATE FUNCTION upgrade_check.same_rows(what text, before regclass, after regclass)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    gone text;
    appeared text;
BEGIN
    EXECUTE format('SELECT string_agg(r::text, E''\n'' ORDER BY r::text) FROM (TABLE %s EXCEPT ALL TABLE %s) r',
                   before, after) INTO gone;
    EXECUTE format('SELECT string_agg(r::text, E''\n'' ORDER BY r::text) FROM (TABLE %s EXCEPT ALL TABLE %s) r',
                   after, before) INTO appeared;
    IF gone IS NOT NULL OR appeared IS NOT NULL THEN
        RAISE EXCEPTION 'upgrade test: % differ across ALTER EXTENSION UPDATE', what
            USING DETAIL = format(E'rows before the update (%s) missing after it:\n%s\n' ||
                                  E'rows after the update (%s) that were not there before:\n%s',
                                  before, coalesce(gone, '(none)'), after, coalesce(appeared, '(none)'));
    END IF;
END
$$;
