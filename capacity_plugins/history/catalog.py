"""The run catalog: one SQLite file by default, a PostgreSQL database for a team.

Where: `--history` or the `CAPACITY_HISTORY` environment variable — a path (the embedded catalog,
SQLite: in the standard library, one file beside the results, nothing to install or serve, safe
for one writer at a time, which is what `capacity run` is) or a `postgresql://` URL (psycopg 3,
the `postgresql` extra: several CI runners recording into one database that Grafana reads).
Neither: every analysed run is recorded in `history.sqlite` beside its results folder (`off`
records nothing), and the commands that read a catalog find ./results/history.sqlite.

The same SQL serves both: `?` placeholders (psycopg's `%s` here), the types of history/schema.py.
Every failure to open, migrate or write is a `UserError`: one line naming the catalog (its URL
without the password), never a traceback.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from capacity_plugins.analysis.runfacts import redact_url
from capacity_plugins.contracts.history import RunEntry, StepEntry
from capacity_plugins.errors import UserError
from capacity_plugins.history import schema

ENV = "CAPACITY_HISTORY"
# the embedded catalog's name beside the results folders; `off` as the catalog turns recording off
DEFAULT_FILE = "history.sqlite"
DEFAULT_CATALOG = Path("results") / DEFAULT_FILE
OFF = "off"
POSTGRES_INSTALL = "pip install 'capacity-plugins[postgresql]'"
RUN_COLUMNS = ("kind", "parent_id", "results_dir", "recorded_unix", "started_unix", "scenario", "target", "model",
               "engine", "engine_version", "dialect", "load_kind", "capacity_rps", "capacity_lo", "capacity_hi",
               "capacity_interval_kind", "knee", "knee_unit", "limiting_slo", "verdict", "decision_complete",
               "valid_steps", "repeats")
STEP_COLUMNS = tuple(StepEntry.model_fields)
# pg_advisory_xact_lock's key while a PostgreSQL catalog migrates (any fixed number: "capacity" history)
MIGRATION_LOCK = 310031


def _named(option: str | None) -> str:
    return (option or os.environ.get(ENV, "")).strip()


def where_from(option: str | None) -> str:
    """The catalog to read: the one named by `--history`, else by CAPACITY_HISTORY, else the embedded
    one `capacity run` keeps beside its default output (./results/history.sqlite) when it exists;
    UserError when none is."""
    where = _named(option)
    if where.lower() == OFF:
        raise UserError(f"no catalog: {ENV} / --history is {OFF!r}; give --history PATH|postgresql://...")
    if where:
        return where
    if DEFAULT_CATALOG.is_file():
        return str(DEFAULT_CATALOG)
    raise UserError(f"no catalog: give --history PATH|postgresql://... or set {ENV} (there is no {DEFAULT_CATALOG})")


def recording_where(option: str | None, results_root: Path) -> str | None:
    """Where an analysed run is recorded: the catalog named by `--history`, else by CAPACITY_HISTORY,
    else the embedded one beside the run's folder (RESULTS_ROOT/history.sqlite); None when the name is
    `off` (recording is on by default: a run history nobody set up is still there when needed)."""
    where = _named(option)
    if where.lower() == OFF:
        return None
    return where or str(results_root / DEFAULT_FILE)


def is_postgres(where: str) -> bool:
    return where.startswith(("postgresql://", "postgres://"))


class Catalog:
    """An open catalog (module doc); use as a context manager or call close()."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.name = redact_url(where) if is_postgres(where) else where
        self.dialect = "postgresql" if is_postgres(where) else "sqlite"
        self._db: Any = self._connect()
        try:
            self._migrate()
        except UserError:
            self.close()
            raise

    # -- connection -------------------------------------------------------------------------------

    def _connect(self) -> Any:
        if self.dialect == "sqlite":
            path = Path(self.where)
            if path.is_dir():
                raise UserError(f"{self.name}: a folder, not a catalog file (e.g. {path / 'history.sqlite'})")
            if not path.parent.is_dir():
                raise UserError(f"{self.name}: no such folder {path.parent}")
            try:
                # transactions are ours (BEGIN IMMEDIATE below), not the module's implicit ones,
                # which would leave DDL outside them
                db = sqlite3.connect(path, timeout=30, isolation_level=None)
                db.execute("PRAGMA foreign_keys = ON")
                db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.DatabaseError as e:
                raise UserError(f"{self.name}: not a catalog ({e})") from None
            return db
        try:
            import psycopg
        except ModuleNotFoundError:
            raise UserError(f"{self.name}: a PostgreSQL catalog needs psycopg: {POSTGRES_INSTALL}") from None
        try:
            return psycopg.connect(self.where, connect_timeout=10)
        except psycopg.Error as e:
            raise UserError(f"{self.name}: cannot connect ({_first_line(e)})") from None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.dialect == "postgresql" else sql

    def _execute(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        try:
            return cur.execute(self._sql(sql), tuple(params))
        except Exception as e:  # sqlite3.Error / psycopg.Error: the driver's one line, named
            if not _is_db_error(e):
                raise
            raise UserError(f"{self.name}: {_first_line(e)}") from None

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cur = self._db.cursor()
        try:
            self._execute(cur, sql, params)
            return list(cur.fetchall())
        finally:
            cur.close()

    @contextmanager
    def _writing(self) -> Iterator[Any]:
        """A cursor inside one write transaction: committed at the end, rolled back on any error.
        SQLite takes its write lock at the start (BEGIN IMMEDIATE), so two processes opening a new
        catalog at once migrate it one after the other."""
        cur = self._db.cursor()
        try:
            if self.dialect == "sqlite":
                self._execute(cur, "BEGIN IMMEDIATE")
            yield cur
            self._db.commit()
        except BaseException:
            self._db.rollback()
            raise
        finally:
            cur.close()

    def _transaction(self, statements: Iterable[tuple[str, Sequence[Any]]]) -> list[Any]:
        """Run statements in one transaction; the first value each returned (RETURNING id)."""
        out = []
        with self._writing() as cur:
            for sql, params in statements:
                self._execute(cur, sql, params)
                row = cur.fetchone() if cur.description else None
                out.append(row[0] if row else None)
        return out

    # -- schema -----------------------------------------------------------------------------------

    def _migrate(self) -> None:
        """Apply the migrations this catalog lacks, in one transaction that holds the catalog's
        write lock (SQLite) or an advisory lock (PostgreSQL): concurrent openers wait, then find
        the work done."""
        with self._writing() as cur:
            if self.dialect == "postgresql":
                self._execute(cur, "SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
            self._execute(cur, schema.MIGRATIONS_TABLE)
            self._execute(cur, "SELECT version FROM schema_migrations")
            applied = {int(r[0]) for r in cur.fetchall()}
            newer = [v for v in applied if v > schema.LATEST]
            if newer:
                raise UserError(f"{self.name}: schema version {max(newer)} is newer than this capacity-plugins "
                                f"knows ({schema.LATEST}): upgrade capacity-plugins to use it")
            for version, description, _ in schema.MIGRATIONS:
                if version in applied:
                    continue
                for statement in schema.statements(self.dialect, version):
                    self._execute(cur, statement)
                self._execute(cur, "INSERT INTO schema_migrations (version, description, applied_unix) VALUES (?, ?, ?)",
                              (version, description, time.time()))

    def schema_version(self) -> int:
        return int(self._query("SELECT max(version) FROM schema_migrations")[0][0] or 0)

    # -- writing ----------------------------------------------------------------------------------

    def record(self, entry: RunEntry, summary_json: str) -> int:
        """Record a run; its id. A results folder recorded before (analysed again: `capacity analyze`
        records too) is updated in place and keeps its id, so the baselines blessed on it and the
        set it belongs to still point at it (a delete would cascade to them)."""
        values = [getattr(entry, c) for c in RUN_COLUMNS]
        values[RUN_COLUMNS.index("recorded_unix")] = entry.recorded_unix or time.time()
        row = (*values, json.dumps(entry.slo), summary_json)
        names = (*RUN_COLUMNS, "slo_json", "summary_json")
        with self._writing() as cur:
            self._execute(cur, "SELECT id FROM runs WHERE results_dir = ? ORDER BY id", (entry.results_dir,))
            had = [int(r[0]) for r in cur.fetchall()]
            if had:
                run_id = had[0]
                # a repeat's folder analysed on its own keeps the set it was recorded in
                kept = [(c, v) for c, v in zip(names, row, strict=True)
                        if not (c == "parent_id" and entry.parent_id is None)]
                sets = ", ".join(f"{c} = ?" for c, _ in kept)
                self._execute(cur, f"UPDATE runs SET {sets} WHERE id = ?", (*(v for _, v in kept), run_id))
                for table in ("steps", "run_labels"):
                    self._execute(cur, f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
                for extra in had[1:]:  # duplicates an older version may have left
                    self._execute(cur, "DELETE FROM runs WHERE id = ?", (extra,))
            else:
                marks = ", ".join("?" * len(names))
                self._execute(cur, f"INSERT INTO runs ({', '.join(names)}) VALUES ({marks}) RETURNING id", row)
                run_id = int(cur.fetchone()[0])
            step_marks = ", ".join("?" * (len(STEP_COLUMNS) + 1))
            for s in entry.steps:
                self._execute(cur, f"INSERT INTO steps (run_id, {', '.join(STEP_COLUMNS)}) VALUES ({step_marks})",
                              (run_id, *(getattr(s, c) for c in STEP_COLUMNS)))
            for k, v in sorted(entry.labels.items()):
                self._execute(cur, "INSERT INTO run_labels (run_id, key, value) VALUES (?, ?, ?)", (run_id, k, v))
        entry.id = run_id
        return entry.id

    def bless(self, name: str, run_id: int) -> None:
        """Name a recorded run (or set) as a baseline; an existing name moves to it."""
        self._transaction([("DELETE FROM baselines WHERE name = ?", (name,)),
                           ("INSERT INTO baselines (name, run_id, blessed_unix) VALUES (?, ?, ?)",
                            (name, run_id, time.time()))])

    # -- reading ----------------------------------------------------------------------------------

    def runs(self, scenario: str | None = None, target: str | None = None, labels: dict[str, str] | None = None,
             kinds: Sequence[str] = ("run", "repeat_set"), top_level: bool = False) -> list[RunEntry]:
        """Recorded runs, oldest first; `top_level` leaves out the repeats inside a recorded set."""
        where, params = [f"kind IN ({', '.join('?' * len(kinds))})"], list(kinds)
        if scenario:
            where.append("scenario = ?")
            params.append(scenario)
        if target:
            where.append("target = ?")
            params.append(target)
        if top_level:
            where.append("parent_id IS NULL")
        for k, v in (labels or {}).items():
            where.append("EXISTS (SELECT 1 FROM run_labels l WHERE l.run_id = runs.id AND l.key = ? AND l.value = ?)")
            params += [k, v]
        rows = self._query(f"SELECT id, {', '.join(RUN_COLUMNS)}, slo_json FROM runs WHERE {' AND '.join(where)} "
                           "ORDER BY started_unix, id", params)
        return [self._entry(r) for r in rows]

    def _entry(self, row: Sequence[Any]) -> RunEntry:
        doc = dict(zip(("id", *RUN_COLUMNS), row[:-1], strict=True))
        doc["decision_complete"] = bool(doc["decision_complete"])
        doc["slo"] = json.loads(row[-1] or "{}")
        entry = RunEntry.model_validate(doc)
        entry.labels = {k: v for k, v in self._query("SELECT key, value FROM run_labels WHERE run_id = ? ORDER BY key",
                                                     (entry.id,))}
        steps = self._query(f"SELECT {', '.join(STEP_COLUMNS)} FROM steps WHERE run_id = ? ORDER BY step", (entry.id,))
        entry.steps = [StepEntry.model_validate({**dict(zip(STEP_COLUMNS, s, strict=True)),
                                                 "slo_pass": bool(s[-2]), "valid": bool(s[-1])}) for s in steps]
        return entry

    def find(self, ref: str) -> RunEntry | None:
        """A recorded run by id, by results folder (as given or absolute), or by baseline name."""
        ids: list[tuple[Any, ...]] = []
        if ref.isdigit():
            ids = self._query("SELECT id FROM runs WHERE id = ?", (int(ref),))
        if not ids:
            ids = self._query("SELECT id FROM runs WHERE results_dir = ? OR results_dir = ?",
                              (ref, str(Path(ref).resolve())))
        if not ids:
            ids = self._query("SELECT run_id FROM baselines WHERE name = ?", (ref,))
        return self._one(int(ids[0][0])) if ids else None

    def _one(self, run_id: int) -> RunEntry:
        cols = ", ".join(("id", *RUN_COLUMNS, "slo_json"))
        return self._entry(self._query(f"SELECT {cols} FROM runs WHERE id = ?", (run_id,))[0])

    def summary_json(self, run_id: int) -> str:
        return str(self._query("SELECT summary_json FROM runs WHERE id = ?", (run_id,))[0][0])

    def baselines(self) -> list[tuple[str, int, float]]:
        return [(str(n), int(i), float(t)) for n, i, t in
                self._query("SELECT name, run_id, blessed_unix FROM baselines ORDER BY name")]


def _is_db_error(e: Exception) -> bool:
    if isinstance(e, sqlite3.Error):
        return True
    mod = type(e).__module__
    return mod.startswith("psycopg")


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


def open_catalog(option: str | None = None) -> Catalog:
    return Catalog(where_from(option))
