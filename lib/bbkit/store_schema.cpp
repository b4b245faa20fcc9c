#include "bbkit/store_schema.hpp"

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bbkit/error.hpp"
#include "bbkit/seal.hpp"
#include "bbkit/sqlite.hpp"

namespace bbkit {

// holding_states, a macro so that migrations 3 and 4 can carry it too (the rows' sums they fill
// pool_usage with); must agree with holds_space() (store_schema_test checks it).
#define BBKIT_HOLDING_STATES                                                             \
    "('allocating','allocated','staging-in','staged-in','pre-run','running','post-run'," \
    "'staging-out','staged-out','teardown','teardown-fail','deleting')"
const char* const holding_states = BBKIT_HOLDING_STATES;

namespace {

// Each entry moves the schema from version N-1 to N; never edit one that has shipped.
const std::vector<const char*> migrations = {
    // 1: the first schema.
    R"sql(
CREATE TABLE pools (
    name        TEXT PRIMARY KEY,
    path        TEXT NOT NULL,
    uuid        TEXT NOT NULL,
    draining    INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE buffers (
    id              INTEGER PRIMARY KEY,
    key             TEXT NOT NULL,
    cluster         TEXT NOT NULL,
    job_id          INTEGER,
    incarnation     INTEGER,
    name            TEXT,
    pool            TEXT NOT NULL REFERENCES pools(name),
    requested_bytes INTEGER NOT NULL,
    allocated_bytes INTEGER NOT NULL,
    uid             INTEGER NOT NULL,
    gid             INTEGER NOT NULL,
    user            TEXT NOT NULL,
    state           TEXT NOT NULL,
    reason          TEXT NOT NULL DEFAULT '',
    message         TEXT NOT NULL DEFAULT '',
    entered         TEXT NOT NULL DEFAULT '',
    directory       TEXT NOT NULL,
    access          TEXT NOT NULL DEFAULT '',
    type            TEXT NOT NULL DEFAULT '',
    staging         TEXT NOT NULL DEFAULT '',
    owner           TEXT NOT NULL DEFAULT '',
    expires         INTEGER,
    use_count       INTEGER NOT NULL DEFAULT 0,
    created         INTEGER NOT NULL,
    lock_pid        INTEGER,
    lock_start      INTEGER,
    reaped          INTEGER NOT NULL DEFAULT 0,
    CHECK ((job_id IS NULL) <> (name IS NULL))
);
CREATE UNIQUE INDEX buffers_job ON buffers(cluster, job_id, incarnation) WHERE job_id IS NOT NULL;
CREATE INDEX buffers_key ON buffers(key);
CREATE UNIQUE INDEX buffers_live_key ON buffers(key)
    WHERE state NOT IN ('complete', 'deleted');
CREATE INDEX buffers_state ON buffers(state);
CREATE INDEX buffers_pool_state ON buffers(pool, state, allocated_bytes);
CREATE INDEX buffers_uid_state ON buffers(uid, state, allocated_bytes);
CREATE INDEX buffers_trash ON buffers(pool, allocated_bytes)
    WHERE reaped = 0 AND state IN ('complete', 'deleted');
CREATE TABLE queue (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    pool            TEXT NOT NULL REFERENCES pools(name),
    key             TEXT NOT NULL UNIQUE,
    requested_bytes INTEGER NOT NULL,
    waiter_pid      INTEGER NOT NULL,
    waiter_start    INTEGER NOT NULL,
    enqueued        INTEGER NOT NULL
);
CREATE INDEX queue_pool ON queue(pool, seq);
CREATE TABLE history (
    id          INTEGER PRIMARY KEY,
    key         TEXT NOT NULL,
    from_state  TEXT,
    to_state    TEXT NOT NULL,
    time        INTEGER NOT NULL,
    who         TEXT NOT NULL,
    reason      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX history_key ON history(key, id);
)sql",
    // 2: persistent buffers' space per pool without visiting every live job buffer's row
    // (pool_status needs it on every write).
    R"sql(
CREATE INDEX buffers_persistent ON buffers(pool, state, allocated_bytes) WHERE name IS NOT NULL;
)sql",
    // 3: each pool's used bytes, kept by triggers in the transaction that changes a buffer row,
    // so a write no longer sums every live row (O(live buffers) twice per alloc). It is derived
    // from the rows by SQLite itself, never written by bbkit; `bb-pool check` compares it with
    // the sum and `check --repair` recomputes it.
    "CREATE TABLE pool_usage (\n"
    "    pool TEXT PRIMARY KEY,\n"
    "    used INTEGER NOT NULL\n"
    ") WITHOUT ROWID;\n"
    "INSERT INTO pool_usage (pool, used) SELECT name, (SELECT COALESCE(SUM(allocated_bytes), 0)"
    " FROM buffers WHERE buffers.pool = pools.name AND state IN " BBKIT_HOLDING_STATES
    ") FROM pools;\n"
    "CREATE TRIGGER pool_usage_pool AFTER INSERT ON pools BEGIN\n"
    "    INSERT OR IGNORE INTO pool_usage (pool, used) VALUES (NEW.name, 0);\n"
    "END;\n"
    "CREATE TRIGGER pool_usage_insert AFTER INSERT ON buffers WHEN NEW.state "
    "IN " BBKIT_HOLDING_STATES
    " BEGIN\n"
    "    UPDATE pool_usage SET used = used + NEW.allocated_bytes WHERE pool = NEW.pool;\n"
    "END;\n"
    "CREATE TRIGGER pool_usage_delete AFTER DELETE ON buffers WHEN OLD.state "
    "IN " BBKIT_HOLDING_STATES
    " BEGIN\n"
    "    UPDATE pool_usage SET used = used - OLD.allocated_bytes WHERE pool = OLD.pool;\n"
    "END;\n"
    "CREATE TRIGGER pool_usage_update AFTER UPDATE OF pool, state, allocated_bytes ON buffers"
    " BEGIN\n"
    "    UPDATE pool_usage SET used = used - OLD.allocated_bytes\n"
    "        WHERE pool = OLD.pool AND OLD.state IN " BBKIT_HOLDING_STATES
    ";\n"
    "    UPDATE pool_usage SET used = used + NEW.allocated_bytes\n"
    "        WHERE pool = NEW.pool AND NEW.state IN " BBKIT_HOLDING_STATES
    ";\n"
    "END;\n",
    // 4: pool_usage is kept by WriteTransaction's own writes, in the same statements' transaction
    // (add_used_bytes). SQLite parsed the triggers' text at every connection and compiled them
    // into every statement that writes a buffer: 7-9% of a short command's instructions.
    "DROP TRIGGER pool_usage_pool;\n"
    "DROP TRIGGER pool_usage_insert;\n"
    "DROP TRIGGER pool_usage_delete;\n"
    "DROP TRIGGER pool_usage_update;\n"
    "INSERT OR REPLACE INTO pool_usage (pool, used) SELECT name, (SELECT"
    " COALESCE(SUM(allocated_bytes), 0) FROM buffers WHERE buffers.pool = pools.name AND state "
    "IN " BBKIT_HOLDING_STATES ") FROM pools;\n",
    // 5: a buffer's last failure, kept through the states that follow it (teardown included) so
    // that bb-stat job still says why after a TeardownFailure or an operator's teardown.
    R"sql(
ALTER TABLE buffers ADD COLUMN failure TEXT NOT NULL DEFAULT '';
ALTER TABLE buffers ADD COLUMN failed INTEGER;
)sql",
    // 6: what root trusts in a record (bbkit(7), SECURITY): `seal`, root's keyed hash of the
    // row, and `temp_token`, the secret part of the mover's temporary names (unpredictable, so
    // another user cannot plant a temporary for the mover to adopt).
    R"sql(
ALTER TABLE buffers ADD COLUMN seal TEXT NOT NULL DEFAULT '';
ALTER TABLE buffers ADD COLUMN temp_token TEXT NOT NULL DEFAULT '';
)sql",
    // 7: which host may write a state directory that controllers share (bbkit(7), STATE
    // DIRECTORY, "Controller failover"): one row, written by bb-pool takeover, none until then.
    R"sql(
CREATE TABLE controller (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    epoch   INTEGER NOT NULL,
    host    TEXT NOT NULL,
    since   INTEGER NOT NULL
);
)sql",
    // 8: the accounting (bbkit(7), HISTORY AND ACCOUNTING; bb-stat history): when a buffer's
    // space began and stopped being held (first left pending; reached a final state), filled
    // for the records already there from their history, and one row per stage run as it ended
    // (from this schema on) with its buffer's user and pool, kept in the order they ended, so
    // that the accounting reads a range of them without a join or an index. buffers_held holds
    // all the accounting reads of a buffer: its pass over a range reads the index alone, never
    // the wide rows. Neither is in a row's seal: root acts on
    // none of it.
    R"sql(
ALTER TABLE buffers ADD COLUMN held_since INTEGER;
ALTER TABLE buffers ADD COLUMN ended INTEGER;
UPDATE buffers SET
    held_since = (SELECT MIN(h.time) FROM history h WHERE h.key = buffers.key
                  AND h.to_state = 'allocating' AND h.time >= buffers.created),
    ended = CASE WHEN state IN ('complete', 'deleted') THEN
        COALESCE((SELECT MIN(h.time) FROM history h WHERE h.key = buffers.key
                  AND h.to_state = buffers.state AND h.time >= buffers.created), created)
        END;
CREATE INDEX buffers_held ON buffers(ended, held_since, user, pool, allocated_bytes, failed);
CREATE TABLE stage_runs (
    ended       INTEGER NOT NULL,
    record      INTEGER NOT NULL,
    direction   TEXT NOT NULL CHECK (direction IN ('in', 'out')),
    user        TEXT NOT NULL,
    pool        TEXT NOT NULL,
    started     INTEGER NOT NULL,
    files       INTEGER NOT NULL,
    bytes       INTEGER NOT NULL,
    failed      INTEGER NOT NULL,
    PRIMARY KEY (ended, record, direction)
) WITHOUT ROWID;
)sql",
};
#undef BBKIT_HOLDING_STATES

// The version the file records, whatever it is.
int recorded_version(sqlite::Database& db) {
    sqlite::Query q = db.query("PRAGMA user_version");
    q.step();
    return static_cast<int>(q.integer(0));
}

// One row of sqlite_schema as the schema check compares it: the page it starts on is left out.
struct SchemaObject {
    std::string type;
    std::string table;
    std::optional<std::string> sql;  // none for SQLite's automatic indexes
    bool operator==(const SchemaObject& other) const {
        return std::tie(type, table, sql) == std::tie(other.type, other.table, other.sql);
    }
};

std::map<std::string, SchemaObject> schema_objects(sqlite::Database& db) {
    std::map<std::string, SchemaObject> objects;
    sqlite::Query q = db.query("SELECT type, name, tbl_name, sql FROM sqlite_schema");
    while (q.step())
        objects[q.text(1)] =
            SchemaObject{q.text(0), q.text(2),
                         q.is_null(3) ? std::nullopt : std::optional<std::string>(q.text(3))};
    return objects;
}

// bbkit's schema at `version`, as this SQLite writes it: the migrations run in memory (a few
// million instructions: more than the rest of a short command).
const std::map<std::string, SchemaObject>& built_schema(int version) {
    static std::map<int, std::map<std::string, SchemaObject>> built;
    auto found = built.find(version);
    if (found == built.end()) {
        sqlite::Database db = sqlite::Database::in_memory();
        for (int v = 0; v < version; ++v)
            db.exec(migrations[static_cast<std::size_t>(v)],
                    "building schema " + std::to_string(v + 1) + " in memory failed");
        found = built.emplace(version, schema_objects(db)).first;
    }
    return found->second;
}

std::string object_name(const std::string& type, const std::string& name) {
    return type + " '" + printable(name) + "'";
}

}  // namespace

namespace {

std::string digest_of(const std::map<std::string, SchemaObject>& objects) {
    std::string text;
    for (const auto& [name, object] : objects) {
        const std::string sql = object.sql.value_or("~");
        for (const std::string* field : {&object.type, &name, &object.table, &sql})
            text += std::to_string(field->size()) + ":" + *field + ";";
    }
    return to_hex(sha256(text));
}

}  // namespace

const char* const current_schema_digest =
    "52df7474fa39e6693af568f54463c93288f1c3c84bb243bee2a94186cd06181f";

std::string schema_digest(sqlite::Database& db) {
    return digest_of(schema_objects(db));
}

std::vector<std::string> foreign_schema(sqlite::Database& db, int version) {
    const std::map<std::string, SchemaObject> have = schema_objects(db);
    // The usual answer without building the schema: the digest of the current one.
    if (version == state_schema_version() && digest_of(have) == current_schema_digest)
        return {};
    const std::map<std::string, SchemaObject>& want = built_schema(version);
    std::vector<std::string> differences;
    for (const auto& [name, object] : have) {
        const auto expected = want.find(name);
        if (expected == want.end())
            differences.push_back("state.db holds " +
                                  std::string(object.type == "index" ? "an " : "a ") +
                                  object_name(object.type, name) + " that bbkit did not create");
        else if (!(expected->second == object))
            differences.push_back("state.db's " + object_name(object.type, name) +
                                  " is not the one bbkit creates");
    }
    for (const auto& [name, object] : want)
        if (have.count(name) == 0)
            differences.push_back("state.db lacks bbkit's " + object_name(object.type, name));
    return differences;
}

void check_schema(sqlite::Database& db, int version) {
    const std::vector<std::string> differences = foreign_schema(db, version);
    if (!differences.empty())
        throw Error(ExitCode::no_perm,
                    differences.front() +
                        ": root runs and trusts nothing another account wrote in it (bbkit(7), "
                        "SECURITY; bb-pool check --repair rebuilds it from its sealed records)");
}

int state_schema_version() {
    return static_cast<int>(migrations.size());
}

int schema_version(sqlite::Database& db) {
    const int known = state_schema_version();
    const int found = recorded_version(db);
    if (found > known)
        throw Error(ExitCode::config, "state.db has schema version " + std::to_string(found) +
                                          " but this bbkit knows only up to " +
                                          std::to_string(known) + " (upgrade bbkit)");
    return found;
}

void migrate_schema(sqlite::Database& db) {
    const int known = state_schema_version();
    // WAL is a property of the file: set once, by whoever creates or migrates it. A connection
    // with a rollback journal (a network file system) keeps it: bbkit(7), STATE DIRECTORY.
    if (db.journal() == sqlite::Journal::wal)
        db.exec("PRAGMA journal_mode=WAL", "enabling WAL failed");
    db.begin(true);
    try {
        // Read again under the lock: another process may have migrated the file meanwhile.
        for (int v = recorded_version(db); v < known; ++v) {
            db.exec(migrations[static_cast<std::size_t>(v)],
                    "migrating to schema " + std::to_string(v + 1) + " failed");
            db.exec("PRAGMA user_version = " + std::to_string(v + 1), "setting the version failed");
        }
        db.commit("committing the schema failed");
    } catch (...) {
        db.rollback();
        throw;
    }
}

}  // namespace bbkit
