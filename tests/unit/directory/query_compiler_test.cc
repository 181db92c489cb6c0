// Runs compiled queries against a real in-memory SQLite database with the
// directory's schema, and checks which entities come back.
#include "query/query_compiler.h"

#include <sqlite3.h>

#include <bit>
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "query/query_parser.h"
#include "store/schema.h"

namespace tocl::directory::query {
namespace {

using Gids = std::set<std::string>;

// The directory's real schema comes from Migrate() (store/schema.h).

constexpr int64_t kRunning = 1;
constexpr int64_t kExited = 2;

int64_t Stored(Gid gid) {
  return std::bit_cast<int64_t>(gid.raw());
}

Gid Id(std::string_view text) {
  Result<Gid> gid = Gid::Parse(text);
  REQUIRE(gid.ok());
  return *gid;
}

struct FinalizeStatement {
  void operator()(sqlite3_stmt* statement) const { sqlite3_finalize(statement); }
};
using Statement = std::unique_ptr<sqlite3_stmt, FinalizeStatement>;

// A directory database holding a few hosts, processes and threads, among
// them hosts >= 32768, whose gids are negative when stored.
class Directory {
 public:
  Directory() {
    Result<tocl::directory::Database> opened =
        tocl::directory::Database::Open(":memory:", tocl::directory::OpenMode::kReadWrite);
    REQUIRE(opened.ok());
    database_ = std::move(*opened);
    REQUIRE(tocl::directory::Migrate(database_).ok());
    db_ = database_.get();

    AddHost("h1", "alpha", kRunning);
    AddHost("h4", "delta", kRunning);
    AddHost("h40000", "big", kExited);
    AddHost("h65535", "edge", kRunning);

    AddProcess("h1.p1", "indexer-1", 4711, kRunning);
    AddProcess("h1.p2", "indexer-2", 4712, kExited);
    AddProcess("h4.p1", "merger-main", 4711, kRunning);
    AddProcess("h40000.p1", "far-away", 99, kExited);
    AddProcess("h65535.p7", "edge-proc", 7, kRunning);

    AddThread("h1.p1.t1", "main", kRunning);
    AddThread("h1.p1.t2", "tmp 1", kRunning);
    AddThread("h1.p2.t1", "main", kExited);
    AddThread("h4.p1.t1", "merge-0", kRunning);
    AddThread("h4.p1.t2", "merge-1", kRunning);
    AddThread("h40000.p1.t1", "far-thread", kExited);
    AddThread("h65535.p7.t3", "edge-thread", kRunning);

    SetAttribute("h1.p1.t1", "role", "merger");
    SetAttribute("h1.p1.t2", "role", "a");
    SetAttribute("h1.p1.t2", "comment", "x' OR 1=1 --");
    SetAttribute("h4.p1.t1", "role", "merger");
    SetAttribute("h4.p1.t1", "tier", "gold");
    SetAttribute("h4.p1.t2", "role", "b");
    SetAttribute("h40000.p1.t1", "role", "merger");
    SetAttribute("h65535.p7.t3", "role", "merger");
    SetAttribute("h1.p1", "team", "search");
    SetAttribute("h4.p1", "team", "merge");
    SetAttribute("h1", "rack", "r2");
    SetAttribute("h4", "rack", "r1");
    SetAttribute("h65535", "rack", "r1");
  }

  void AddHost(std::string_view gid, std::string_view name, int64_t state) {
    Execute("INSERT INTO hosts(gid, name, state, started_at_us) VALUES(?1, ?2, ?3, 0)",
            {Stored(Id(gid)), std::string(name), state});
  }
  void AddProcess(std::string_view gid, std::string_view name, int64_t pid, int64_t state) {
    Execute(
        "INSERT INTO processes(gid, name, os_pid, state, started_at_us) VALUES(?1, ?2, ?3, ?4, 0)",
        {Stored(Id(gid)), std::string(name), pid, state});
  }
  void AddThread(std::string_view gid, std::string_view name, int64_t state) {
    Execute("INSERT INTO threads(gid, name, state, started_at_us) VALUES(?1, ?2, ?3, 0)",
            {Stored(Id(gid)), std::string(name), state});
  }
  void SetAttribute(std::string_view gid, std::string_view key, std::string_view value) {
    Execute(
        "INSERT INTO attributes(entity, key, value, kind) VALUES(?1, ?2, ?3, ?4)",
        {Stored(Id(gid)), std::string(key), std::string(value), tocl::directory::KindOf(Id(gid))});
  }

  int64_t Count(std::string_view table) {
    Statement statement = Prepare("SELECT count(*) FROM " + std::string(table));
    REQUIRE(sqlite3_step(statement.get()) == SQLITE_ROW);
    return sqlite3_column_int64(statement.get(), 0);
  }

  // Every entity `text` matches, checked to come back the same when read a
  // page of two at a time.
  Gids Query(std::string_view text) {
    INFO("query: " << text);
    Result<Expr> expr = Parse(text);
    REQUIRE(expr.status().message() == "");
    Result<std::vector<TableQuery>> queries = Compile(*expr);
    REQUIRE(queries.ok());
    Gids all;
    for (const TableQuery& query : *queries) {
      const std::vector<int64_t> rows = Run(query, std::numeric_limits<int64_t>::min(), -1);
      std::vector<int64_t> paged;
      int64_t after = std::numeric_limits<int64_t>::min();
      while (true) {
        const std::vector<int64_t> page = Run(query, after, 2);
        paged.insert(paged.end(), page.begin(), page.end());
        if (page.size() < 2) break;
        after = page.back();
      }
      CHECK(paged == rows);
      for (int64_t row : rows) {
        const Gid gid = Gid::FromRaw(std::bit_cast<uint64_t>(row));
        CHECK(TableOf(gid) == query.table);
        all.insert(gid.ToString());
      }
    }
    return all;
  }

  // Runs one compiled statement; rows come back in stored (signed) order.
  std::vector<int64_t> Run(const TableQuery& query, int64_t after, int64_t limit) {
    INFO("sql: " << query.sql);
    Statement statement = Prepare(query.sql);
    // Every parameter the SQL uses is bound, and nothing else.
    REQUIRE(sqlite3_bind_parameter_count(statement.get()) ==
            kFirstParam - 1 + static_cast<int>(query.params.size()));
    std::vector<Param> params = {after, limit};
    params.insert(params.end(), query.params.begin(), query.params.end());
    Bind(statement.get(), params);
    std::vector<int64_t> rows;
    int rc = SQLITE_OK;
    while ((rc = sqlite3_step(statement.get())) == SQLITE_ROW) {
      const int64_t row = sqlite3_column_int64(statement.get(), 0);
      if (!rows.empty()) CHECK(rows.back() < row);
      rows.push_back(row);
    }
    REQUIRE(rc == SQLITE_DONE);
    return rows;
  }

  // The "detail" column of EXPLAIN QUERY PLAN, one line per step.
  std::string Plan(const TableQuery& query) {
    Statement statement = Prepare("EXPLAIN QUERY PLAN " + query.sql);
    std::vector<Param> params = {int64_t{0}, int64_t{10}};
    params.insert(params.end(), query.params.begin(), query.params.end());
    Bind(statement.get(), params);
    std::string plan;
    while (sqlite3_step(statement.get()) == SQLITE_ROW) {
      plan += reinterpret_cast<const char*>(sqlite3_column_text(statement.get(), 3));
      plan += "\n";
    }
    return plan;
  }

 private:
  static Table TableOf(Gid gid) {
    if (gid.is_host()) return Table::kHosts;
    if (gid.is_process()) return Table::kProcesses;
    return Table::kThreads;
  }

  Statement Prepare(const std::string& sql) {
    INFO("sql: " << sql);
    sqlite3_stmt* raw = nullptr;
    const int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &raw, nullptr);
    INFO("sqlite: " << sqlite3_errmsg(db_));
    REQUIRE(rc == SQLITE_OK);
    return Statement(raw);
  }

  // The values outlive the statement's steps, so SQLite need not copy them
  // (a null destructor is SQLITE_STATIC).
  static void Bind(sqlite3_stmt* statement, const std::vector<Param>& params) {
    for (size_t i = 0; i < params.size(); ++i) {
      const int index = static_cast<int>(i) + 1;
      if (const int64_t* number = std::get_if<int64_t>(&params[i])) {
        REQUIRE(sqlite3_bind_int64(statement, index, *number) == SQLITE_OK);
      } else {
        const std::string& text = std::get<std::string>(params[i]);
        REQUIRE(sqlite3_bind_text(statement, index, text.data(), static_cast<int>(text.size()),
                                  nullptr) == SQLITE_OK);
      }
    }
  }

  void Execute(const std::string& sql, const std::vector<Param>& params) {
    Statement statement = Prepare(sql);
    Bind(statement.get(), params);
    REQUIRE(sqlite3_step(statement.get()) == SQLITE_DONE);
  }

  tocl::directory::Database database_;  // the real schema, migrated
  sqlite3* db_ = nullptr;               // database_'s handle, for the raw API
};

const Gids kAll = {"h1",       "h4",        "h40000",       "h65535",      "h1.p1",    "h1.p2",
                   "h4.p1",    "h40000.p1", "h65535.p7",    "h1.p1.t1",    "h1.p1.t2", "h1.p2.t1",
                   "h4.p1.t1", "h4.p1.t2",  "h40000.p1.t1", "h65535.p7.t3"};
const Gids kMergers = {"h1.p1.t1", "h4.p1.t1", "h40000.p1.t1", "h65535.p7.t3"};

Gids Except(const Gids& from, const Gids& removed) {
  Gids rest;
  for (const std::string& gid : from) {
    if (removed.count(gid) == 0) rest.insert(gid);
  }
  return rest;
}

std::vector<TableQuery> Compiled(std::string_view text) {
  INFO("query: " << text);
  Result<Expr> expr = Parse(text);
  REQUIRE(expr.ok());
  Result<std::vector<TableQuery>> queries = Compile(*expr);
  REQUIRE(queries.ok());
  return *queries;
}

std::vector<Table> Tables(std::string_view text) {
  std::vector<Table> tables;
  for (const TableQuery& query : Compiled(text)) tables.push_back(query.table);
  return tables;
}

bool IsDriven(const TableQuery& query) {
  return query.sql.find("FROM attributes d") != std::string::npos;
}

// Whether the statements walk the attribute index (all of them or none).
bool UsesDriver(std::string_view text) {
  const std::vector<TableQuery> queries = Compiled(text);
  REQUIRE_FALSE(queries.empty());
  const bool driven = IsDriven(queries.front());
  for (const TableQuery& query : queries) CHECK(IsDriven(query) == driven);
  return driven;
}

TEST_CASE("the examples of the language description find the right entities", "[query]") {
  Directory directory;
  CHECK(directory.Query("kind=thread and role=merger and host=h4") == Gids{"h4.p1.t1"});
  CHECK(directory.Query("name~indexer-*") == Gids{"h1.p1", "h1.p2"});
  CHECK(directory.Query("pid=4711") == Gids{"h1.p1", "h4.p1"});
  CHECK(directory.Query("state=exited") ==
        Gids{"h40000", "h1.p2", "h40000.p1", "h1.p2.t1", "h40000.p1.t1"});
  CHECK(directory.Query(R"((role=a or role=b) and not name~"tmp *")") == Gids{"h4.p1.t2"});
  CHECK(directory.Query(R"(role="x' OR 1=1 --")").empty());
}

TEST_CASE("kind matches the entity's table", "[query]") {
  Directory directory;
  CHECK(directory.Query("kind=host") == Gids{"h1", "h4", "h40000", "h65535"});
  CHECK(directory.Query("kind=process") ==
        Gids{"h1.p1", "h1.p2", "h4.p1", "h40000.p1", "h65535.p7"});
  CHECK(directory.Query("kind!=host") == Except(kAll, {"h1", "h4", "h40000", "h65535"}));
  CHECK(directory.Query("kind=thread and kind!=thread").empty());
}

TEST_CASE("name compares with =, !=, ~ and !~", "[query]") {
  Directory directory;
  CHECK(directory.Query("name=main") == Gids{"h1.p1.t1", "h1.p2.t1"});
  CHECK(directory.Query("name!=main") == Except(kAll, {"h1.p1.t1", "h1.p2.t1"}));
  CHECK(directory.Query("name~merge*") == Gids{"h4.p1", "h4.p1.t1", "h4.p1.t2"});
  CHECK(directory.Query("name!~*-*") ==
        Gids{"h1", "h4", "h40000", "h65535", "h1.p1.t1", "h1.p1.t2", "h1.p2.t1"});
  CHECK(directory.Query(R"(name~"tmp ?")") == Gids{"h1.p1.t2"});
  CHECK(directory.Query("name~[ab]*") == Gids{"h1", "h40000"});
  // GLOB is case-sensitive, and '=' never globs.
  CHECK(directory.Query("name~MAIN").empty());
  CHECK(directory.Query("name=merge*").empty());
}

TEST_CASE("state compares with = and !=", "[query]") {
  Directory directory;
  const Gids exited = {"h40000", "h1.p2", "h40000.p1", "h1.p2.t1", "h40000.p1.t1"};
  CHECK(directory.Query("state=exited") == exited);
  CHECK(directory.Query("state!=exited") == Except(kAll, exited));
  CHECK(directory.Query("state=running") == Except(kAll, exited));
  CHECK(directory.Query("state!=running") == exited);
}

TEST_CASE("host by id selects everything under that host", "[query]") {
  Directory directory;
  const Gids h1 = {"h1", "h1.p1", "h1.p2", "h1.p1.t1", "h1.p1.t2", "h1.p2.t1"};
  CHECK(directory.Query("host=h1") == h1);
  CHECK(directory.Query("host!=h1") == Except(kAll, h1));
  CHECK(directory.Query("host=h2").empty());
  // Hosts from 32768 on are stored as negative integers.
  CHECK(directory.Query("host=h40000") == Gids{"h40000", "h40000.p1", "h40000.p1.t1"});
  CHECK(directory.Query("host!=h40000") == Except(kAll, {"h40000", "h40000.p1", "h40000.p1.t1"}));
  CHECK(directory.Query("host=h65535") == Gids{"h65535", "h65535.p7", "h65535.p7.t3"});
}

TEST_CASE("host by name selects everything under the hosts of that name", "[query]") {
  Directory directory;
  CHECK(directory.Query("host=alpha") == directory.Query("host=h1"));
  CHECK(directory.Query("host=big") == Gids{"h40000", "h40000.p1", "h40000.p1.t1"});
  CHECK(directory.Query("host=edge") == Gids{"h65535", "h65535.p7", "h65535.p7.t3"});
  CHECK(directory.Query("host!=big") == Except(kAll, {"h40000", "h40000.p1", "h40000.p1.t1"}));
  CHECK(directory.Query("host=nosuch").empty());
  CHECK(directory.Query("host!=nosuch") == kAll);

  // Names are not unique: every host of that name counts.
  directory.AddHost("h5", "delta", kRunning);
  directory.AddProcess("h5.p1", "other", 1, kRunning);
  directory.AddHost("h50000", "delta", kRunning);
  CHECK(directory.Query("host=delta") ==
        Gids{"h4", "h4.p1", "h4.p1.t1", "h4.p1.t2", "h5", "h5.p1", "h50000"});
}

TEST_CASE("process selects the process and its threads", "[query]") {
  Directory directory;
  const Gids p1 = {"h1.p1", "h1.p1.t1", "h1.p1.t2"};
  CHECK(directory.Query("process=h1.p1") == p1);
  CHECK(directory.Query("process!=h1.p1") == Except(kAll, p1));
  CHECK(directory.Query("process=h40000.p1") == Gids{"h40000.p1", "h40000.p1.t1"});
  CHECK(directory.Query("process=h65535.p7") == Gids{"h65535.p7", "h65535.p7.t3"});
  CHECK(directory.Query("process=h1.p9").empty());
  // A host is never inside a process.
  CHECK(Tables("process=h1.p1") == std::vector<Table>{Table::kProcesses, Table::kThreads});
}

TEST_CASE("pid matches processes only, so pid= is false for hosts and threads", "[query]") {
  Directory directory;
  CHECK(directory.Query("pid=4711") == Gids{"h1.p1", "h4.p1"});
  CHECK(directory.Query("pid=7") == Gids{"h65535.p7"});
  CHECK(directory.Query("pid!=4711") == Except(kAll, {"h1.p1", "h4.p1"}));
  CHECK(Tables("pid=4711") == std::vector<Table>{Table::kProcesses});
  CHECK(Tables("kind=thread and pid=4711").empty());
  CHECK(directory.Query("kind=thread and pid=4711").empty());
  CHECK(directory.Query("kind=thread and pid!=4711").size() == 7);
}

TEST_CASE("gid matches exactly one entity", "[query]") {
  Directory directory;
  CHECK(directory.Query("gid=h4") == Gids{"h4"});
  CHECK(directory.Query("gid=h1.p2") == Gids{"h1.p2"});
  CHECK(directory.Query("gid=h65535.p7.t3") == Gids{"h65535.p7.t3"});
  CHECK(directory.Query("gid!=h4") == Except(kAll, {"h4"}));
  CHECK(directory.Query("gid=h9").empty());
  CHECK(Tables("gid=h1.p1.t1") == std::vector<Table>{Table::kThreads});
}

TEST_CASE("attributes compare with =, !=, ~ and !~", "[query]") {
  Directory directory;
  CHECK(directory.Query("role=merger") == kMergers);
  CHECK(directory.Query("role!=merger") == Except(kAll, kMergers));
  CHECK(directory.Query("role~m*") == kMergers);
  CHECK(directory.Query("role!~[ab]") == Except(kAll, {"h1.p1.t2", "h4.p1.t2"}));
  CHECK(directory.Query("team=search") == Gids{"h1.p1"});
  // An entity without the key matches != and !~.
  CHECK(directory.Query("rack!=r1") == Except(kAll, {"h4", "h65535"}));
  // ~* means "has the key".
  CHECK(directory.Query("rack~*") == Gids{"h1", "h4", "h65535"});
  CHECK(directory.Query("rack!~*") == Except(kAll, {"h1", "h4", "h65535"}));
  CHECK(directory.Query("nosuch~*").empty());
}

TEST_CASE("and binds tighter than or, not tighter than and, parentheses override", "[query]") {
  Directory directory;
  CHECK(directory.Query("host=h4 and role=a or role=merger") == kMergers);
  CHECK(directory.Query("host=h4 and (role=a or role=merger)") == Gids{"h4.p1.t1"});
  CHECK(directory.Query("not role=merger and kind=thread") ==
        Gids{"h1.p1.t2", "h1.p2.t1", "h4.p1.t2"});
  CHECK(directory.Query("not (role=merger and kind=thread)") == Except(kAll, kMergers));
  CHECK(directory.Query("not not role=merger") == kMergers);
}

TEST_CASE("values that look like SQL are only values", "[query]") {
  Directory directory;
  for (const char* text : {
           R"(role="x' OR 1=1 --")",
           R"(role='x\' OR \'1\'=\'1')",
           R"(name="'; DROP TABLE threads; --")",
           R"(name~"*' OR name GLOB '*")",
           R"(host="alpha' OR 1=1 --")",
           R"(role="1) OR (1=1")",
           R"(name="?1")",
       }) {
    CHECK(directory.Query(text).empty());
    CHECK(directory.Query(std::string("not ") + text) == kAll);
  }
  // Stored as a value, it is found as a value.
  CHECK(directory.Query(R"(comment="x' OR 1=1 --")") == Gids{"h1.p1.t2"});
  CHECK(directory.Count("hosts") == 4);
  CHECK(directory.Count("processes") == 5);
  CHECK(directory.Count("threads") == 7);
  CHECK(directory.Count("attributes") == 13);
}

TEST_CASE("kind folding leaves out the tables a query cannot match", "[query]") {
  using V = std::vector<Table>;
  CHECK(Tables("kind=thread") == V{Table::kThreads});
  CHECK(Tables("kind=host or kind=process") == V{Table::kHosts, Table::kProcesses});
  CHECK(Tables("not kind=thread") == V{Table::kHosts, Table::kProcesses});
  CHECK(Tables("kind!=thread and name=x") == V{Table::kHosts, Table::kProcesses});
  CHECK(Tables("not (kind=host or kind=process)") == V{Table::kThreads});
  CHECK(Tables("kind=thread and kind=host").empty());
  CHECK(Tables("kind=thread or name=x") == V{Table::kHosts, Table::kProcesses, Table::kThreads});
  CHECK(Tables("role=merger and (kind=process or kind=thread)") ==
        V{Table::kProcesses, Table::kThreads});

  // A condition that folds to true leaves no predicate behind.
  const std::vector<TableQuery> threads = Compiled("kind=thread");
  CHECK(threads.front().sql ==
        "SELECT e.gid FROM threads e WHERE e.gid > ?1 AND (1) ORDER BY e.gid LIMIT ?2");
  CHECK(threads.front().params.empty());

  Directory directory;
  CHECK(directory.Query("kind=host or kind=process") ==
        Gids{"h1", "h4", "h40000", "h65535", "h1.p1", "h1.p2", "h4.p1", "h40000.p1", "h65535.p7"});
}

TEST_CASE("an attribute equality in the top-level and drives the query", "[query]") {
  CHECK(UsesDriver("role=merger"));
  CHECK(UsesDriver("kind=thread and role=merger and host=h4"));
  CHECK(UsesDriver("name~m* and (kind=thread and role=merger)"));
  CHECK_FALSE(UsesDriver("role=merger or kind=host"));
  CHECK_FALSE(UsesDriver("not role!=merger"));
  CHECK_FALSE(UsesDriver("role~merger"));

  // Each table walks only its own kind's slice of the index.
  const std::vector<TableQuery> all = Compiled("role=merger");
  REQUIRE(all.size() == 3);
  CHECK(all[0].sql ==
        "SELECT e.gid FROM attributes d CROSS JOIN hosts e ON e.gid = d.entity WHERE d.key = ?3 "
        "AND d.value = ?4 AND d.kind = 1 AND d.entity > ?1 AND (1) ORDER BY d.entity LIMIT ?2");
  CHECK(all[1].sql ==
        "SELECT e.gid FROM attributes d CROSS JOIN processes e ON e.gid = d.entity WHERE d.key = "
        "?3 AND d.value = ?4 AND d.kind = 2 AND d.entity > ?1 AND (1) ORDER BY d.entity LIMIT ?2");

  const std::vector<TableQuery> queries = Compiled("kind=thread and role=merger and host=h4");
  REQUIRE(queries.size() == 1);
  CHECK(queries[0].sql ==
        "SELECT e.gid FROM attributes d CROSS JOIN threads e ON e.gid = d.entity WHERE d.key = ?3 "
        "AND d.value = ?4 AND d.kind = 3 AND d.entity > ?1 AND (e.gid BETWEEN ?5 AND ?6) ORDER BY "
        "d.entity LIMIT ?2");
  CHECK(queries[0].params == std::vector<Param>{std::string("role"), std::string("merger"),
                                                Stored(Gid::Host(4)),
                                                Stored(Gid::Host(4)) + ((int64_t{1} << 48) - 1)});
}

TEST_CASE("driven and undriven forms of a query return the same rows", "[query]") {
  Directory directory;
  const std::pair<const char*, const char*> pairs[] = {
      {"role=merger", "not role!=merger"},
      {"kind=thread and role=merger and host=h4", "kind=thread and host=h4 and not role!=merger"},
      {"role=merger and tier=gold", "not (role!=merger or tier!=gold)"},
      {"role=merger and state=running and not host=h1",
       "state=running and not host=h1 and not role!=merger"},
      {"rack=r1", "not rack!=r1"},
      {"team=merge", "not team!=merge"},
      {"role=merger and host=h40000", "host=h40000 and not role!=merger"},
      {"role=merger and role=a", "not role!=merger and not role!=a"},
  };
  for (const auto& [driven, undriven] : pairs) {
    INFO(driven << " vs " << undriven);
    CHECK(UsesDriver(driven));
    CHECK_FALSE(UsesDriver(undriven));
    CHECK(directory.Query(driven) == directory.Query(undriven));
  }
  CHECK(directory.Query("role=merger and tier=gold") == Gids{"h4.p1.t1"});
  CHECK(directory.Query("rack=r1") == Gids{"h4", "h65535"});
  CHECK(directory.Query("team=merge") == Gids{"h4.p1"});
  CHECK(directory.Query("role=merger and role=a").empty());
}

TEST_CASE("a driven query walks the attribute value index", "[query]") {
  Directory directory;
  const std::vector<TableQuery> queries = Compiled("kind=thread and role=merger");
  REQUIRE(queries.size() == 1);
  const std::string plan = directory.Plan(queries[0]);
  INFO(plan);
  CHECK(plan.find("attributes_by_value") != std::string::npos);
  CHECK(plan.find("TEMP B-TREE") == std::string::npos);  // no sort: index order is gid order
}

TEST_CASE("a hand-built expression that breaks the tree's shape is refused", "[query]") {
  Expr empty_and;
  empty_and.type = Expr::Type::kAnd;
  CHECK(Compile(empty_and).status().code() == StatusCode::kInvalidArgument);

  Expr bare_not;
  bare_not.type = Expr::Type::kNot;
  CHECK(Compile(bare_not).status().code() == StatusCode::kInvalidArgument);

  Expr glob_on_pid;
  glob_on_pid.comparison.field = Field::kPid;
  glob_on_pid.comparison.op = Op::kGlob;
  CHECK(Compile(glob_on_pid).status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tocl::directory::query
