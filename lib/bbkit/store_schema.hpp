// The schema of state.db and the migrations that bring an older file to it. The version is
// SQLite's user_version. The migrations an open needs run in one write transaction: a file is
// at its old version or the current one, never in between. Only a writing command migrates
// (bbkit(7), STATE DIRECTORY).
#pragma once

#include <string>
#include <vector>

namespace bbkit {

namespace sqlite {
class Database;
}

// The newest state.db schema this build knows. An older database is migrated on open; a newer
// one is refused with Error(config) asking to upgrade bbkit.
int state_schema_version();

// The states that hold space, as an SQL list for `state IN ...`: holds_space() in SQL.
extern const char* const holding_states;

// The version `db` records, 0 for an empty file. StateStore reads it first, so a file that is
// not SQLite fails here (Error(config)); a version newer than state_schema_version() is
// Error(config) "... (upgrade bbkit)".
int schema_version(sqlite::Database& db);

// Brings `db` to state_schema_version() in one write transaction, and turns WAL on. The caller
// keeps other writers out (StateStore holds <state>/lock). A failed step rolls back every step:
// the file keeps the version it had.
void migrate_schema(sqlite::Database& db);

// The first schema whose buffer rows carry root's seal (bbkit(7), SECURITY).
constexpr int first_sealed_schema = 6;
// The first schema with the controller claim (bbkit(7), STATE DIRECTORY, "Controller failover").
constexpr int first_controller_schema = 7;

// Where the schema of `db` (every row of sqlite_schema: tables, indexes, triggers, views) is
// not exactly the one bbkit creates for `version`, one line per object, naming it: an object
// bbkit did not create, one it created and is missing, or one whose definition changed. Empty
// when they are the same. bbkit's schema of each version is built from the migrations in a
// database in memory, so it is what this SQLite writes for them.
std::vector<std::string> foreign_schema(sqlite::Database& db, int version);

// A digest of the schema of `db` as foreign_schema compares it (every row of sqlite_schema but
// its root page), and that of bbkit's current schema as SQLite writes it: a database whose
// digest is that one needs no building of the schema to be checked. store_schema_test keeps
// the constant equal to what the migrations build; a new migration changes it.
std::string schema_digest(sqlite::Database& db);
extern const char* const current_schema_digest;

// Error(no_perm) with the first line of foreign_schema(db, version), if any: root reads and
// writes nothing in a database whose schema another account changed (bbkit(7), SECURITY).
void check_schema(sqlite::Database& db, int version);

}  // namespace bbkit
