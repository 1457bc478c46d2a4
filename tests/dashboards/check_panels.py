#!/usr/bin/env python3
"""Checks gpuledger's Grafana dashboards against a running query service.

Usage:
    check_panels.py HOST PORT [PASSWORD] [options]

HOST and PORT are the query service's PostgreSQL face (`--pg-listen`).
PASSWORD is a query-service token (admin or finance, so that every tenant
is visible); without one, $GPULEDGER_QUERY_TOKEN is used, and without that
a placeholder (a service started without --api-token accepts any password).

What it does, for every `dashboards/*.json`:

1. Validates the JSON as a Grafana dashboard: title, uid, schemaVersion,
   a `panels` list whose panels each have an id, type, title, gridPos
   {h, w, x, y}, a datasource and targets with refIds; panel ids unique;
   `templating.list` variables well-formed; every data source uid one the
   provisioning file under `dashboards/provisioning/datasources/` defines.
2. Resolves the template variables in order, the way Grafana does: a SQL
   query variable runs its query (time macros expanded) and takes its
   first value after Grafana's sort; custom, constant and textbox
   variables take their first option; `--var NAME=VALUE` overrides.
3. For every SQL target, interpolates the variables and Grafana's own
   `$__interval`, `$__interval_ms`, `$__from`, `$__to`, `$__range…` as the
   SQL data source's front end does (`$__interval` computed from the time
   range, `--max-data-points` and the panel's min interval, as Grafana
   does), then expands the macros exactly as the PostgreSQL data source's
   back end does (`$__timeFilter`, `$__timeFrom`, `$__timeTo`,
   `$__timeGroup`, `$__timeGroupAlias`, `$__time`, `$__timeEpoch`,
   `$__unixEpochFilter`, `$__unixEpochGroup`, ...), runs the SQL over
   psycopg (simple query protocol, autocommit, as Grafana's pgx `Exec`
   does) and checks the answer's shape:
     time_series: a column named exactly `time` (timestamp or numeric epoch,
       no NULLs, ascending) and at least one numeric value column; other
       columns must be text (series labels);
     table: at least one column;
     every query: at least one row over the demo history.
   A target that uses a variable with "All" enabled runs twice: once with
   the variable's first value and once with All selected.
4. Prometheus targets are only checked to have a non-empty `expr`.

The report lists every variable and panel with OK or FAIL and the reason;
the exit status is 0 only if everything passed.
"""

from __future__ import annotations

import argparse
import calendar
import datetime as dt
import glob
import json
import os
import re
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Optional

try:
    import psycopg
except ImportError:  # pragma: no cover - reported at start-up
    psycopg = None

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_DASHBOARDS = os.path.join(REPO_ROOT, "dashboards")

SQL_DS_TYPES = {"grafana-postgresql-datasource", "postgres"}
PROM_DS_TYPES = {"prometheus"}

# Values used when a variable has neither a query answer nor options.
BUILTIN_DEFAULTS = {"period": "2026-11"}

# PostgreSQL type OIDs, grouped the way Grafana's SQL engine treats them.
NUMERIC_OIDS = {20: "int8", 21: "int2", 23: "int4", 700: "float4", 701: "float8", 1700: "numeric"}
TIME_OIDS = {1082: "date", 1114: "timestamp", 1184: "timestamptz"}
TEXT_OIDS = {18: "char", 19: "name", 25: "text", 705: "unknown", 1042: "bpchar", 1043: "varchar"}

NS = 1_000_000_000  # nanoseconds in a second


# --------------------------------------------------------------------------
# Go formatting, as Grafana's back end prints numbers and times
# --------------------------------------------------------------------------

def go_float(value: float) -> str:
    """Formats a float64 as Go's `fmt.Sprintf("%v", x)` does: the shortest
    digits that round-trip, in exponent form when the decimal exponent is
    below -4 or at least 6. So 3600 prints as `3600`, 86400 as `86400`,
    0.5 as `0.5` and 2592000 (30 days) as `2.592e+06`."""
    if value == 0:
        return "0"
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    sign = "-" if value < 0 else ""
    digits_tuple = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(str(d) for d in digits_tuple.digits)
    # Position of the decimal point relative to the digit string.
    point = len(digits) + digits_tuple.exponent
    exponent = point - 1
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        exp_sign = "-" if exponent < 0 else "+"
        return f"{sign}{mantissa}e{exp_sign}{abs(exponent):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def go_rfc3339nano(moment: dt.datetime) -> str:
    """Formats a time as Go's `t.UTC().Format(time.RFC3339Nano)`: trailing
    zeros of the fraction dropped, no fraction at all when it is zero."""
    moment = moment.astimezone(dt.timezone.utc)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += "." + f"{moment.microsecond:06d}".rstrip("0")
    return text + "Z"


def unix_seconds(moment: dt.datetime) -> int:
    """Go's `t.Unix()`: whole seconds since the epoch, rounded down."""
    return calendar.timegm(moment.utctimetuple())


def unix_nanos(moment: dt.datetime) -> int:
    """Go's `t.UnixNano()` (to the microsecond this script keeps)."""
    return unix_seconds(moment) * NS + moment.microsecond * 1000


# --------------------------------------------------------------------------
# Durations and intervals
# --------------------------------------------------------------------------

_GO_UNITS = {
    "ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000,
    "s": NS, "m": 60 * NS, "h": 3600 * NS,
}
_GO_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def go_parse_duration(text: str) -> int:
    """Go's `time.ParseDuration`, in nanoseconds ("1h30m", "1.5h", "90s")."""
    if text in ("0", "+0", "-0"):
        return 0
    sign = 1
    rest = text
    if rest[:1] in "+-" and rest:
        sign = -1 if rest[0] == "-" else 1
        rest = rest[1:]
    if not rest:
        raise ValueError(f"invalid duration {text!r}")
    total = 0
    pos = 0
    while pos < len(rest):
        m = _GO_DURATION_PART.match(rest, pos)
        if not m:
            raise ValueError(f"invalid duration {text!r}")
        number, unit = m.group(1), m.group(2)
        total += int(Decimal(number) * _GO_UNITS[unit])
        pos = m.end()
    return sign * total


def _add_months(moment: dt.datetime, months: int) -> dt.datetime:
    """Go's `t.AddDate(0, months, 0)`: day overflow rolls into the next month."""
    index = moment.month - 1 + months
    year, month = moment.year + index // 12, index % 12 + 1
    first = moment.replace(year=year, month=month, day=1)
    return first + dt.timedelta(days=moment.day - 1)


def gtime_parse_interval(text: str, now: Optional[dt.datetime] = None) -> int:
    """The plugin SDK's `gtime.ParseInterval`, in nanoseconds.

    `Nd`, `Nw`, `NM` and `Ny` are measured from the current UTC wall time
    (so a month is 28 to 31 days); anything else is a Go duration."""
    m = re.fullmatch(r"(\d+)([dwMy])", text)
    if not m:
        return go_parse_duration(text)
    num, unit = int(m.group(1)), m.group(2)
    now = now or dt.datetime.now(dt.timezone.utc)
    if unit == "d":
        later = now + dt.timedelta(days=num)
    elif unit == "w":
        later = now + dt.timedelta(days=7 * num)
    elif unit == "M":
        later = _add_months(now, num)
    else:
        later = _add_months(now, 12 * num)
    delta = later - now
    return (delta.days * 86400 + delta.seconds) * NS + delta.microseconds * 1000


# Grafana's front end `rangeutil.intervalToMs` units.
_FRONTEND_UNITS_S = {"y": 31536000, "M": 2592000, "w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}


def frontend_interval_to_ms(text: str) -> float:
    """Grafana front end's `intervalToMs` ("1h" -> 3600000; a bare number is seconds)."""
    text = text.strip()
    try:
        if float(text):  # `describeInterval`: a bare number counts seconds
            return float(int(float(text))) * 1000
    except ValueError:
        pass
    m = re.match(r"^(-?\d+(?:\.\d+)?)(ms|[Mwdhmsy])", text)
    if not m:
        raise ValueError(f"invalid interval {text!r}")
    return float(m.group(1)) * _FRONTEND_UNITS_S[m.group(2)] * 1000


# Upper bound (ms, inclusive unless noted) -> rounded interval (ms): Grafana's
# `roundInterval`, identical in the front end and the back end.
_ROUND_INTERVAL = [
    (10, 1), (15, 10), (35, 20), (75, 50), (150, 100), (350, 200), (750, 500),
    (1500, 1000), (3500, 2000), (7500, 5000), (12500, 10000), (17500, 15000),
    (25000, 20000), (45000, 30000), (90000, 60000), (210000, 120000),
    (450000, 300000), (750000, 600000), (1050000, 900000), (1500000, 1200000),
    (2700000, 1800000), (5400000, 3600000), (9000000, 7200000),
    (16200000, 10800000), (32400000, 21600000), (86400000, 43200000),
    (172800000, 86400000), (604800000, 86400000), (1814400000, 604800000),
]


def round_interval(ms: float) -> int:
    """Grafana's `roundInterval`: snaps a raw interval to a readable one."""
    for bound, rounded in _ROUND_INTERVAL:
        if ms <= bound:
            return rounded
    return 2592000000 if ms < 3628800000 else 31536000000


def seconds_to_hms(seconds: float) -> str:
    """Grafana front end's `secondsToHms`, which names `$__interval`."""
    years = int(seconds // 31536000)
    if years:
        return f"{years}y"
    days = int((seconds % 31536000) // 86400)
    if days:
        return f"{days}d"
    hours = int((seconds % 31536000 % 86400) // 3600)
    if hours:
        return f"{hours}h"
    minutes = int((seconds % 31536000 % 86400 % 3600) // 60)
    if minutes:
        return f"{minutes}m"
    secs = int(seconds % 31536000 % 86400 % 3600 % 60)
    if secs:
        return f"{secs}s"
    millis = int(seconds * 1000)
    if millis:
        return f"{millis}ms"
    return "less than a millisecond"


def go_format_interval(ms: int) -> str:
    """The plugin SDK's `gtime.FormatInterval`, which the back end uses for
    a `$__interval` the front end left in place."""
    for unit_ms, suffix in ((31536000000, "y"), (86400000, "d"), (3600000, "h"), (60000, "m"), (1000, "s"), (1, "ms")):
        if ms >= unit_ms:
            return f"{ms // unit_ms}{suffix}"
    return "1ms"


def calculate_interval(range_ms: float, max_data_points: int, low_limit: Optional[str]) -> tuple[int, str]:
    """Grafana's `rangeutil.calculateInterval`: (interval in ms, `$__interval` text).

    `low_limit` is the panel's "Min interval" or, without one, the data
    source's (`timeInterval`, `1m` by default for SQL data sources)."""
    low_ms = frontend_interval_to_ms(low_limit) if low_limit else 1
    interval_ms = round_interval(range_ms / max_data_points)
    if low_ms > interval_ms:
        interval_ms = int(low_ms)
    return interval_ms, seconds_to_hms(interval_ms / 1000)


# --------------------------------------------------------------------------
# Macro expansion: Grafana's PostgreSQL data source back end
# --------------------------------------------------------------------------

@dataclass
class TimeContext:
    """The time range and interval one query runs with."""

    time_from: dt.datetime
    time_to: dt.datetime
    interval_ms: int
    interval_text: str


class MacroError(Exception):
    """A macro Grafana would refuse ("interpolation failed")."""


_MACRO_RE = re.compile(r"\$([_a-zA-Z0-9]+)\(([^\)]*)\)")


def _interval_seconds(arg: str) -> float:
    try:
        nanos = gtime_parse_interval(arg.strip("'"))
    except ValueError as exc:
        raise MacroError(f"error parsing interval {arg}") from exc
    return nanos // NS + (nanos % NS) / 1e9


def _fill_arg(name: str, args: list[str]) -> None:
    """A third `$__timeGroup` argument sets Grafana's gap filling; only its
    syntax matters to the SQL, so it is validated and otherwise ignored."""
    if len(args) == 3 and args[2] not in ("NULL", "previous"):
        try:
            float(args[2])
        except ValueError as exc:
            raise MacroError(f"error parsing fill value {args[2]}") from exc


def evaluate_macro(name: str, args: list[str], ctx: TimeContext) -> str:
    """One macro, as `postgresMacroEngine.evaluateMacro` (timescaledb off)."""
    start, end = ctx.time_from, ctx.time_to
    if name == "__time":
        if not args or args == [""]:
            raise MacroError(f"missing time column argument for macro {name}")
        return f'{args[0]} AS "time"'
    if name == "__timeEpoch":
        if not args or args == [""]:
            raise MacroError(f"missing time column argument for macro {name}")
        return f'extract(epoch from {args[0]}) as "time"'
    if name == "__timeFilter":
        if not args or args == [""]:
            raise MacroError(f"missing time column argument for macro {name}")
        return f"{args[0]} BETWEEN '{go_rfc3339nano(start)}' AND '{go_rfc3339nano(end)}'"
    if name == "__timeFrom":
        return f"'{go_rfc3339nano(start)}'"
    if name == "__timeTo":
        return f"'{go_rfc3339nano(end)}'"
    if name in ("__timeGroup", "__unixEpochGroup"):
        if len(args) < 2:
            raise MacroError(f"macro {name} needs time column and interval and optional fill value")
        seconds = go_float(_interval_seconds(args[1]))
        _fill_arg(name, args)
        if name == "__timeGroup":
            return f"floor(extract(epoch from {args[0]})/{seconds})*{seconds}"
        return f"floor(({args[0]})/{seconds})*{seconds}"
    if name in ("__timeGroupAlias", "__unixEpochGroupAlias"):
        return evaluate_macro(name[: -len("Alias")], args, ctx) + ' AS "time"'
    if name == "__unixEpochFilter":
        if not args or args == [""]:
            raise MacroError(f"missing time column argument for macro {name}")
        return f"{args[0]} >= {unix_seconds(start)} AND {args[0]} <= {unix_seconds(end)}"
    if name == "__unixEpochNanoFilter":
        if not args or args == [""]:
            raise MacroError(f"missing time column argument for macro {name}")
        return f"{args[0]} >= {unix_nanos(start)} AND {args[0]} <= {unix_nanos(end)}"
    if name == "__unixEpochNanoFrom":
        return str(unix_nanos(start))
    if name == "__unixEpochNanoTo":
        return str(unix_nanos(end))
    raise MacroError(f'unknown macro "{name}"')


def expand_macros(sql: str, ctx: TimeContext) -> str:
    """Grafana's back-end substitutions, in its order.

    First the global ones of `sqleng.Interpolate` (`$__interval_ms`,
    `$__interval`, `$__unixEpochFrom()`, `$__unixEpochTo()`), then every
    `$name(args)` through the PostgreSQL macro engine. Arguments are split
    on every comma and trimmed of spaces, and may not contain `)`, as in
    Grafana. Like Grafana, a `$__timeGroup(...)` whose first occurrence in
    the query is directly followed by a comma gets ` AS "time"` appended
    (the pre-5.3 compatibility rule)."""
    sql = sql.replace("$__interval_ms", str(ctx.interval_ms))
    sql = sql.replace("$__interval", go_format_interval(ctx.interval_ms))
    sql = sql.replace("$__unixEpochFrom()", str(unix_seconds(ctx.time_from)))
    sql = sql.replace("$__unixEpochTo()", str(unix_seconds(ctx.time_to)))

    original = sql
    out: list[str] = []
    last = 0
    for m in _MACRO_RE.finditer(original):
        name, raw_args = m.group(1), m.group(2)
        if name == "__timeGroup":
            first = original.find(m.group(0))
            after = first + len(m.group(0))
            if first >= 0 and after < len(original) and original[after] == ",":
                name = "__timeGroupAlias"
        args = [a.strip(" ") for a in raw_args.split(",")]
        out.append(original[last:m.start()])
        try:
            out.append(evaluate_macro(name, args, ctx))
        except MacroError as exc:
            if "(" in raw_args:
                raise MacroError(
                    f"{exc} (Grafana ends a macro's arguments at the first ')': "
                    f"it read ${m.group(1)}({raw_args}); compute the expression in a subquery)"
                ) from exc
            raise
        last = m.end()
    out.append(original[last:])
    return "".join(out)


# --------------------------------------------------------------------------
# Template variables: Grafana's front end (templateSrv + SQL data source)
# --------------------------------------------------------------------------

_VARIABLE_RE = re.compile(
    r"\$([A-Za-z0-9_]+)"
    r"|\[\[([A-Za-z0-9_]+?)(?::([A-Za-z0-9_]+))?\]\]"
    r"|\$\{([A-Za-z0-9_]+)(?:\.([^:^\}]+))?(?::([^\}]+))?\}"
)

# Names Grafana fills in itself, with no dashboard variable behind them.
GLOBAL_VARIABLES = {
    "__interval", "__interval_ms", "__rate_interval", "__rate_interval_ms",
    "__range", "__range_s", "__range_ms", "__from", "__to", "__dashboard",
    "__org", "__user", "__timezone", "__name", "timeFilter", "__all_variables",
    "__url_time_range",
}


def quote_literal(value: str) -> str:
    """The PostgreSQL query model's `quoteLiteral`."""
    return "'" + value.replace("'", "''") + "'"


@dataclass
class VarValue:
    """A variable's current selection."""

    values: list[str]
    multi: bool = False
    include_all: bool = False
    is_all: bool = False
    all_value: Optional[str] = None  # custom "All" value, inserted unformatted


def sql_interpolate_value(var: VarValue) -> str:
    """`SqlDatasource.interpolateVariable`: a single value is inserted with
    its quotes doubled but unquoted (so SQL writes `'$tenant'`); a
    multi-value or All-enabled variable's values are quoted and joined with
    commas (so SQL writes `IN ($pool)`)."""
    if var.is_all and var.all_value:
        return var.all_value
    if var.multi or var.include_all:
        return ",".join(quote_literal(v) for v in var.values)
    if len(var.values) == 1:
        return var.values[0].replace("'", "''")
    return ",".join(quote_literal(v) for v in var.values)


def _format_value(var: VarValue, fmt: str) -> str:
    values = var.values
    if var.is_all and fmt == "text":
        return "All"
    if var.is_all and var.all_value:
        return var.all_value
    if fmt in ("raw", "text"):
        return ",".join(values)
    if fmt == "csv":
        return ",".join(values)
    if fmt == "sqlstring":
        return ",".join(quote_literal(v) for v in values)
    if fmt == "singlequote":
        return ",".join("'" + v.replace("'", "\\'") + "'" for v in values)
    if fmt == "doublequote":
        return ",".join('"' + v.replace('"', '\\"') + '"' for v in values)
    if fmt == "pipe":
        return "|".join(values)
    if fmt == "json":
        return json.dumps(values if len(values) != 1 else values[0])
    if fmt == "regex":
        escaped = [re.escape(v) for v in values]
        return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"
    raise ValueError(f"format {fmt!r} is not supported by this checker")


def interpolate_variables(
    text: str,
    variables: dict[str, VarValue],
    builtins: dict[str, str],
    default_format: Callable[[VarValue], str] = sql_interpolate_value,
) -> tuple[str, list[str]]:
    """Grafana's `templateSrv.replace`: `$name`, `${name}`, `${name:format}`
    and `[[name]]`. Names it does not know are left as they are (Grafana's
    macros, `$__timeFilter` and friends, pass through untouched). Returns
    the text and the names of unknown `${...}` references."""
    unknown: list[str] = []

    def replace(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(4)
        fmt = m.group(3) or m.group(6)
        if name in variables:
            var = variables[name]
            return _format_value(var, fmt) if fmt else default_format(var)
        if name in builtins:
            value = builtins[name]
            if fmt and name in ("__from", "__to"):
                moment = dt.datetime.fromtimestamp(int(value) / 1000, dt.timezone.utc)
                if fmt in ("date", "date:iso"):
                    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
                if fmt == "date:seconds":
                    return str(int(value) // 1000)
            return value.replace("'", "''")
        if m.group(4) or m.group(2):
            unknown.append(name)
        return m.group(0)

    return _VARIABLE_RE.sub(replace, text), unknown


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------

@dataclass
class Result:
    """One checked item: a dashboard, a variable or a panel."""

    kind: str
    name: str
    ok: bool = True
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def fail(self, why: str) -> None:
        self.ok = False
        self.failures.append(why)

    def note(self, what: str) -> None:
        self.notes.append(what)


class Reporter:
    """Collects results and prints them as they come."""

    def __init__(self, verbose: bool) -> None:
        self.verbose = verbose
        self.results: list[Result] = []

    def heading(self, text: str) -> None:
        print()
        print(text)

    def emit(self, result: Result) -> None:
        self.results.append(result)
        status = "OK  " if result.ok else "FAIL"
        print(f"  {status} {result.kind:<9} {result.name}")
        for why in result.failures:
            for i, line in enumerate(why.splitlines()):
                print(("         - " if i == 0 else "           ") + line)
        if self.verbose or not result.ok:
            for what in result.notes:
                for i, line in enumerate(what.splitlines()):
                    print(("           " if i else "         · ") + line)


# --------------------------------------------------------------------------
# Running SQL
# --------------------------------------------------------------------------

class SqlRunner:
    """Runs queries over one autocommit connection, re-opening it if a
    query leaves it unusable."""

    def __init__(self, host: str, port: int, password: str, timeout_s: int) -> None:
        self.args = dict(
            host=host, port=port, user="grafana", password=password,
            dbname="gpuledger", autocommit=True, connect_timeout=10,
        )
        self.timeout_s = timeout_s
        self.conn = None

    def connect(self):
        """Opens the connection unless it is open (psycopg.Error if refused)."""
        if self.conn is None or self.conn.closed:
            self.conn = psycopg.connect(**self.args)
            if self.timeout_s:
                self.conn.execute(f"SET statement_timeout = {int(self.timeout_s) * 1000}")
        return self.conn

    def run(self, sql: str) -> tuple[list[tuple[str, int]], list[tuple]]:
        """Returns ([(column name, type oid)], rows). No parameters are
        passed, so psycopg sends the text as is (simple query protocol)."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                if cur.description is None:
                    return [], []
                columns = [(d.name, d.type_code) for d in cur.description]
                return columns, cur.fetchall()
        except psycopg.OperationalError:
            try:
                conn.close()
            finally:
                self.conn = None
            raise

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def type_name(oid: int) -> str:
    for table in (NUMERIC_OIDS, TIME_OIDS, TEXT_OIDS):
        if oid in table:
            return table[oid]
    if psycopg is not None:
        info = psycopg.adapters.types.get(oid)
        if info is not None:
            return info.name
    return f"oid {oid}"


def _epoch_ms(value: Any) -> Optional[float]:
    """A `time` value as Grafana reads it: timestamps as they are, numbers
    as epoch seconds when they have ten integer digits (`e+09`), epoch
    nanoseconds at `e+18`, else milliseconds."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return value.timestamp() * 1000
    if isinstance(value, dt.date):
        return calendar.timegm(value.timetuple()) * 1000.0
    number = float(value)
    exponent = Decimal(repr(abs(number))).adjusted() if number else 0
    if exponent == 9:
        return number * 1000
    if exponent == 18:
        return number / 1e6
    return number


def check_shape(fmt: str, columns: list[tuple[str, int]], rows: list[tuple]) -> tuple[list[str], str]:
    """Checks an answer against what Grafana needs for the target's format.
    Returns (problems, one-line summary)."""
    problems: list[str] = []
    described = ", ".join(f"{n}:{type_name(t)}" for n, t in columns)
    summary = f"{len(rows)} row(s) [{described}]"
    if not columns:
        return ["the statement returned no result set"], summary
    if not rows:
        problems.append("no rows on the demo history")
    if fmt == "table":
        return problems, summary

    names = [n for n, _ in columns]
    if "time" not in names:
        problems.append('time_series needs a column named exactly "time" (Grafana matches it case-sensitively)')
        return problems, summary
    t_index = names.index("time")
    t_oid = columns[t_index][1]
    if t_oid not in NUMERIC_OIDS and t_oid not in TIME_OIDS:
        problems.append(f'column "time" is {type_name(t_oid)}, not a timestamp or epoch number')
    value_cols = []
    for i, (name, oid) in enumerate(columns):
        if i == t_index:
            continue
        if oid in NUMERIC_OIDS:
            value_cols.append(name)
        elif oid not in TEXT_OIDS and name != "metric":
            problems.append(
                f'column "{name}" is {type_name(oid)}: Grafana converts value columns to float, '
                "so a time series may hold only numbers and text labels"
            )
    if not value_cols:
        problems.append("time_series needs at least one numeric value column")
    if rows and (t_oid in NUMERIC_OIDS or t_oid in TIME_OIDS):
        stamps = [_epoch_ms(r[t_index]) for r in rows]
        if any(s is None for s in stamps):
            problems.append('column "time" has NULLs')
        else:
            if any(b < a for a, b in zip(stamps, stamps[1:])):
                problems.append('rows are not in ascending "time" order (add ORDER BY 1)')
            low, high = min(stamps), max(stamps)
            if low < 946684800000 or high > 4102444800000:
                problems.append(
                    f'"time" values fall outside 2000..2100 as Grafana reads them ({low:.0f}..{high:.0f} ms)'
                )
    summary += f"; value column(s): {', '.join(value_cols) or '-'}"
    return problems, summary


# --------------------------------------------------------------------------
# Dashboard structure
# --------------------------------------------------------------------------

VARIABLE_TYPES = {"query", "custom", "constant", "textbox", "interval", "datasource", "adhoc"}


def provisioned_datasources(dash_dir: str) -> dict[str, str]:
    """uid -> type for the data sources under provisioning/datasources.

    Read with a small line parser (no YAML library needed): each item of
    the `datasources:` list starts at the list's indentation with `- `, and
    its `uid:` and `type:` keys sit one level in."""
    found: dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(dash_dir, "provisioning", "datasources", "*.y*ml"))):
        entries: list[dict[str, str]] = []
        item_indent: Optional[int] = None
        in_list = False
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                text = line.split("#", 1)[0].rstrip()
                if not text.strip():
                    continue
                indent = len(text) - len(text.lstrip())
                if indent == 0:
                    in_list = text.startswith("datasources:")
                    continue
                if not in_list:
                    continue
                item = re.match(r"^(\s*)-\s+(.*)$", text)
                if item and (item_indent is None or len(item.group(1)) == item_indent):
                    item_indent = len(item.group(1))
                    entries.append({})
                    text = " " * (item_indent + 2) + item.group(2)
                    indent = item_indent + 2
                if not entries or item_indent is None or indent != item_indent + 2:
                    continue
                kv = re.match(r"^\s*(uid|type):\s*(.+?)\s*$", text)
                if kv:
                    entries[-1][kv.group(1)] = kv.group(2).strip("'\"")
        for entry in entries:
            if entry.get("uid"):
                found[entry["uid"]] = entry.get("type", "")
    return found


def ds_ref(obj: Any) -> dict:
    """A datasource reference as {type, uid} ({} when absent)."""
    if isinstance(obj, dict):
        return obj
    if isinstance(obj, str):
        return {"uid": obj}
    return {}


def all_panels(panels: list) -> list[dict]:
    """Panels in order, with a collapsed row's nested panels after it."""
    out = []
    for p in panels:
        if not isinstance(p, dict):
            out.append(p)
            continue
        out.append(p)
        if p.get("type") == "row" and isinstance(p.get("panels"), list):
            out.extend(all_panels(p["panels"]))
    return out


def validate_dashboard(dash: Any) -> list[str]:
    """Dashboard-level problems (missing keys, wrong types, duplicate ids)."""
    problems = []
    if not isinstance(dash, dict):
        return ["the file is not a JSON object"]
    for key, kind in (("title", str), ("uid", str), ("panels", list)):
        if not isinstance(dash.get(key), kind) or (kind is str and not dash.get(key)):
            problems.append(f"missing or invalid {key!r}")
    if not isinstance(dash.get("schemaVersion"), int) or isinstance(dash.get("schemaVersion"), bool):
        problems.append("schemaVersion must be an integer")
    if "tags" in dash and not (isinstance(dash["tags"], list) and all(isinstance(t, str) for t in dash["tags"])):
        problems.append("tags must be a list of strings")
    templating = dash.get("templating", {"list": []})
    if not isinstance(templating, dict) or not isinstance(templating.get("list"), list):
        problems.append("templating.list must be a list")
    if isinstance(dash.get("panels"), list):
        seen: dict[Any, str] = {}
        for p in all_panels(dash["panels"]):
            if not isinstance(p, dict):
                problems.append("a panel is not an object")
                continue
            pid = p.get("id")
            if pid in seen:
                problems.append(f"panel id {pid} used by both {seen[pid]!r} and {p.get('title')!r}")
            else:
                seen[pid] = p.get("title")
    return problems


def validate_panel(p: dict, known_ds: dict[str, str]) -> list[str]:
    """Structural problems of one panel."""
    problems = []
    if not isinstance(p.get("id"), int) or isinstance(p.get("id"), bool):
        problems.append("id must be an integer")
    if not isinstance(p.get("type"), str) or not p.get("type"):
        problems.append("type missing")
    if not isinstance(p.get("title"), str):
        problems.append("title missing")
    grid = p.get("gridPos")
    if not isinstance(grid, dict):
        problems.append("gridPos missing")
    else:
        for k in ("h", "w", "x", "y"):
            if not isinstance(grid.get(k), int) or isinstance(grid.get(k), bool):
                problems.append(f"gridPos.{k} must be an integer")
        if all(isinstance(grid.get(k), int) for k in ("w", "x")):
            if grid["w"] < 1 or grid["x"] < 0 or grid["x"] + grid["w"] > 24:
                problems.append(f"gridPos x={grid['x']} w={grid['w']} does not fit the 24-column grid")
    if p.get("type") in ("row", "text"):
        return problems
    ds = ds_ref(p.get("datasource"))
    if not ds:
        problems.append("datasource missing")
    elif known_ds and ds.get("uid") not in known_ds and not str(ds.get("uid", "")).startswith("$"):
        problems.append(f"datasource uid {ds.get('uid')!r} is not provisioned ({', '.join(sorted(known_ds))})")
    elif known_ds and ds.get("type") and known_ds.get(ds.get("uid")) and ds["type"] != known_ds[ds["uid"]]:
        problems.append(f"datasource type {ds['type']!r} differs from the provisioned {known_ds[ds['uid']]!r}")
    targets = p.get("targets")
    if not isinstance(targets, list) or not targets:
        problems.append("targets missing or empty")
    else:
        refs = []
        for t in targets:
            if not isinstance(t, dict) or not isinstance(t.get("refId"), str) or not t.get("refId"):
                problems.append("a target has no refId")
            else:
                refs.append(t["refId"])
        if len(refs) != len(set(refs)):
            problems.append("duplicate refIds")
    return problems


def validate_variable(v: Any, names_seen: set) -> list[str]:
    """Structural problems of one template variable."""
    if not isinstance(v, dict):
        return ["not an object"]
    problems = []
    name = v.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_]+", name or ""):
        problems.append("name must be letters, digits and underscores")
    elif name in names_seen:
        problems.append("name used twice")
    vtype = v.get("type")
    if vtype not in VARIABLE_TYPES:
        problems.append(f"unknown type {vtype!r}")
    for key in ("multi", "includeAll"):
        if key in v and not isinstance(v[key], bool):
            problems.append(f"{key} must be true or false")
    if "current" in v and not isinstance(v["current"], dict):
        problems.append("current must be an object")
    if "options" in v and not isinstance(v["options"], list):
        problems.append("options must be a list")
    if vtype == "query":
        if not ds_ref(v.get("datasource")):
            problems.append("a query variable needs a datasource")
        if not variable_query_text(v):
            problems.append("query is empty")
        if "refresh" in v and v["refresh"] not in (0, 1, 2):
            problems.append("refresh must be 0, 1 or 2")
    if vtype in ("custom", "interval") and not (isinstance(v.get("query"), str) and v["query"].strip()):
        problems.append("query (the comma-separated options) is empty")
    return problems


def variable_query_text(v: dict) -> str:
    """A query variable's query: a string, or an object with rawSql/query/expr."""
    q = v.get("query")
    if isinstance(q, str):
        return q.strip()
    if isinstance(q, dict):
        for key in ("rawSql", "query", "expr"):
            if isinstance(q.get(key), str) and q[key].strip():
                return q[key].strip()
    return ""


def split_custom_options(query: str) -> list[tuple[str, str]]:
    """A custom variable's options: comma-separated (`\\,` escapes a
    comma), each `value` or `text : value`."""
    out = []
    for part in re.findall(r"(?:\\,|[^,])+", query):
        part = part.strip().replace("\\,", ",")
        m = re.fullmatch(r"(.+?)\s:\s(.+)", part)
        out.append((m.group(1), m.group(2)) if m else (part, part))
    return out


def sort_values(values: list[tuple[str, str]], mode: int) -> list[tuple[str, str]]:
    """Grafana's variable `sort` option over (text, value) pairs."""
    def num(text: str) -> float:
        m = re.search(r"-?\d+(\.\d+)?", text)
        return float(m.group(0)) if m else float("-inf")

    def natural(text: str):
        return [int(c) if c.isdigit() else c.lower() for c in re.split(r"(\d+)", text)]

    keys = {
        1: (lambda tv: tv[0], False), 2: (lambda tv: tv[0], True),
        3: (lambda tv: num(tv[0]), False), 4: (lambda tv: num(tv[0]), True),
        5: (lambda tv: tv[0].lower(), False), 6: (lambda tv: tv[0].lower(), True),
        7: (lambda tv: natural(tv[0]), False), 8: (lambda tv: natural(tv[0]), True),
    }
    if mode not in keys:
        return values
    key, reverse = keys[mode]
    return sorted(values, key=key, reverse=reverse)


def apply_regex(values: list[tuple[str, str]], regex: str) -> list[tuple[str, str]]:
    """A variable's `regex` filter (`/pattern/flags`); a capture group, or
    the named groups `text` and `value`, pick what is kept."""
    if not regex:
        return values
    m = re.fullmatch(r"/(.*)/([gimsuy]*)", regex)
    pattern, flags = (m.group(1), m.group(2)) if m else (regex, "")
    compiled = re.compile(pattern.replace("(?<", "(?P<"), re.IGNORECASE if "i" in flags else 0)
    out = []
    for text, value in values:
        hit = compiled.search(value)
        if not hit:
            continue
        groups = hit.groupdict()
        if groups:
            value = groups.get("value") or groups.get("text") or value
            text = groups.get("text") or value
        elif hit.groups():
            text = value = hit.group(1)
        out.append((text, value))
    return out


# --------------------------------------------------------------------------
# The checker
# --------------------------------------------------------------------------

class Checker:
    """Checks every dashboard and keeps the counts for the summary."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.time_from = parse_time(args.time_from)
        self.time_to = parse_time(args.time_to)
        self.overrides = dict(parse_override(o) for o in args.var)
        self.reporter = Reporter(args.verbose)
        self.runner = SqlRunner(args.host, args.port, args.password, args.timeout)
        self.known_ds = provisioned_datasources(args.dashboards)
        self.counts = {"dashboards": 0, "panels": 0, "sql_targets": 0, "sql_runs": 0, "prom_targets": 0, "variables": 0}
        self.dashboard_uids: dict[str, str] = {}
        self.unresolved: set[str] = set()  # variables of this dashboard left without a value
        self.failed_variables: set[str] = set()  # and those reported as failing

    # -- time and interval ------------------------------------------------

    def context(self, min_interval: Optional[str], max_data_points: Optional[int]) -> TimeContext:
        range_ms = (self.time_to - self.time_from).total_seconds() * 1000
        points = max_data_points or self.args.max_data_points
        low = min_interval or self.args.ds_min_interval
        interval_ms, text = calculate_interval(range_ms, points, low)
        return TimeContext(self.time_from, self.time_to, interval_ms, text)

    def builtins(self, ctx: TimeContext, dash: dict) -> dict[str, str]:
        range_ms = int((ctx.time_to - ctx.time_from).total_seconds() * 1000)
        return {
            "__interval": ctx.interval_text,
            "__interval_ms": str(ctx.interval_ms),
            "__from": str(unix_seconds(ctx.time_from) * 1000 + ctx.time_from.microsecond // 1000),
            "__to": str(unix_seconds(ctx.time_to) * 1000 + ctx.time_to.microsecond // 1000),
            "__range_ms": str(range_ms),
            "__range_s": str(range_ms // 1000),
            "__range": seconds_to_hms(range_ms / 1000),
            "__dashboard": str(dash.get("title", "")),
        }

    # -- SQL ----------------------------------------------------------------

    def render_sql(self, raw: str, variables: dict[str, VarValue], ctx: TimeContext, dash: dict) -> str:
        """Front-end interpolation, then back-end macros: the SQL Grafana sends."""
        text, unknown = interpolate_variables(raw, variables, self.builtins(ctx, dash))
        # `${name}` Grafana could not resolve, and bare `$name` that is not a
        # macro call: both reach the database as they are.
        leftover = unknown + [
            m.group(1) for m in re.finditer(r"\$([A-Za-z_][A-Za-z0-9_]*)", text)
            if not text[m.end():].startswith("(")
        ]
        empty = sorted(set(leftover) & self.unresolved)
        if empty:
            raise MacroError(
                "variable(s) without a value (see above): " + ", ".join("$" + n for n in empty)
            )
        if leftover:
            raise MacroError(
                "reference(s) to undefined variable(s) left in the SQL: "
                + ", ".join("$" + n for n in sorted(set(leftover)))
            )
        return expand_macros(text, ctx)

    def run_sql(self, sql: str) -> tuple[Optional[str], list[tuple[str, int]], list[tuple]]:
        """(error, columns, rows)."""
        self.counts["sql_runs"] += 1
        try:
            columns, rows = self.runner.run(sql)
            return None, columns, rows
        except psycopg.Error as exc:
            message = str(exc).strip().splitlines()
            return (message[0] if message else exc.__class__.__name__), [], []

    # -- variables --------------------------------------------------------

    def resolve_variables(self, dash: dict, all_mode: bool) -> dict[str, VarValue]:
        """Resolves the variables in order, each query seeing the values
        chosen before it, and reports each one.

        With `all_mode` false every variable takes its first value (the
        selection every target runs with). With `all_mode` true every
        All-enabled variable takes All, so that variables further down are
        listed as Grafana lists them under All; this pass reports only the
        variables that fail in it."""
        selection: dict[str, VarValue] = {}
        names_seen: set = set()
        for v in dash.get("templating", {}).get("list", []) or []:
            name = v.get("name") if isinstance(v, dict) else None
            label = f"${name}" + (f" ({v.get('type')})" if isinstance(v, dict) else "")
            result = Result("variable", label + (" with All upstream" if all_mode else ""))
            if not all_mode:
                self.counts["variables"] += 1
            for problem in validate_variable(v, names_seen):
                result.fail(problem)
            if not result.ok:
                if not all_mode:
                    self.reporter.emit(result)
                continue
            names_seen.add(name)
            values = self.variable_options(v, selection, dash, result)
            options = [val for _, val in values]
            chosen: Optional[str] = None
            if name in self.overrides:
                chosen = self.overrides[name]
                result.note(f"value from --var: {chosen!r}")
            elif values:
                chosen = values[0][1]
            else:
                current = v.get("current") or {}
                cur = current.get("value")
                if isinstance(cur, list):
                    cur = cur[0] if cur else None
                if isinstance(cur, str) and cur and cur != "$__all":
                    chosen = cur
                elif name in BUILTIN_DEFAULTS:
                    chosen = BUILTIN_DEFAULTS[name]
            if chosen is None:
                if v.get("type") in ("adhoc", "datasource"):
                    chosen = ""
                elif v.get("type") == "query" and not self.is_sql_variable(v):
                    # Only SQL is run here: a Prometheus variable stands for
                    # its All value (or nothing) in the expressions it feeds.
                    chosen = v.get("allValue") or ""
                elif result.ok:
                    result.fail("no value: the query returned nothing and there is no default")
            if chosen is not None:
                include_all = bool(v.get("includeAll"))
                take_all = all_mode and include_all and name not in self.overrides
                selection[name] = VarValue(
                    values=(options or [chosen]) if take_all else [chosen],
                    multi=bool(v.get("multi")),
                    include_all=include_all,
                    is_all=take_all,
                    all_value=v.get("allValue") or None,
                )
                if options or self.is_sql_variable(v) or v.get("type") != "query":
                    shown = ", ".join(repr(x) for x in options[:5])
                    more = f" (+{len(options) - 5} more)" if len(options) > 5 else ""
                    result.notes.insert(0, f"{len(options)} option(s): {shown}{more}; checked with {chosen!r}")
                if include_all and self.is_sql_variable(v) or include_all and v.get("type") != "query":
                    result.notes.insert(1, "All enabled: targets using it also run with All selected")
            if not all_mode:
                if chosen is None:
                    self.unresolved.add(name)
                if not result.ok:
                    self.failed_variables.add(name)
                self.reporter.emit(result)
            elif not result.ok and name not in self.failed_variables:
                self.reporter.emit(result)
        return selection

    def is_sql_variable(self, v: dict) -> bool:
        ds = ds_ref(v.get("datasource"))
        return (ds.get("type") or self.known_ds.get(ds.get("uid", ""), "")) in SQL_DS_TYPES

    def variable_options(self, v: dict, selection: dict[str, VarValue], dash: dict, result: Result) -> list[tuple[str, str]]:
        """A variable's (text, value) options, as Grafana would list them."""
        vtype = v.get("type")
        if vtype in ("custom", "interval"):
            return split_custom_options(v.get("query", ""))
        if vtype in ("constant", "textbox"):
            q = v.get("query")
            return [(q, q)] if isinstance(q, str) and q else []
        if vtype != "query":
            return []
        ds = ds_ref(v.get("datasource"))
        ds_type = ds.get("type") or self.known_ds.get(ds.get("uid", ""), "")
        query = variable_query_text(v)
        if ds_type not in SQL_DS_TYPES:
            result.note(f"{ds_type or 'non-SQL'} variable: query not run ({query})")
            return []
        ctx = self.context(None, None)
        try:
            sql = self.render_sql(query, selection, ctx, dash)
        except (MacroError, ValueError) as exc:
            result.fail(f"interpolation failed: {exc}")
            return []
        error, columns, rows = self.run_sql(sql)
        if error:
            result.fail(f"query failed: {error}")
            result.note("SQL sent:\n" + sql)
            return []
        if not rows:
            result.fail("the variable query returned no rows on the demo history")
            result.note("SQL sent:\n" + sql)
            return []
        names = [c for c, _ in columns]
        pairs = []
        for row in rows:
            rec = dict(zip(names, row))
            if "__value" in rec or "__text" in rec:
                value = rec.get("__value", rec.get("__text"))
                text = rec.get("__text", value)
            else:
                text = value = row[0]
            pairs.append(("" if text is None else str(text), "" if value is None else str(value)))
        seen, unique = set(), []
        for text, value in pairs:  # Grafana drops repeated texts
            if text not in seen:
                seen.add(text)
                unique.append((text, value))
        unique = apply_regex(unique, v.get("regex") or "")
        return sort_values(unique, int(v.get("sort") or 0))

    # -- panels -----------------------------------------------------------

    def check_panel(self, p: dict, dash: dict, selection: dict[str, VarValue], with_all: dict[str, VarValue]) -> Result:
        title = p.get("title", "?")
        result = Result("panel", f"#{p.get('id')} {title!r} [{p.get('type')}]")
        for problem in validate_panel(p, self.known_ds):
            result.fail(problem)
        if p.get("type") in ("row", "text") or not isinstance(p.get("targets"), list):
            return result
        panel_ds = ds_ref(p.get("datasource"))
        ctx = self.context(p.get("interval") or None, p.get("maxDataPoints"))
        for t in p["targets"]:
            if not isinstance(t, dict):
                continue
            ref = t.get("refId", "?")
            ds = ds_ref(t.get("datasource")) or panel_ds
            ds_type = ds.get("type") or self.known_ds.get(ds.get("uid", ""), "")
            if ds_type in PROM_DS_TYPES:
                self.counts["prom_targets"] += 1
                expr = t.get("expr")
                if not isinstance(expr, str) or not expr.strip():
                    result.fail(f"{ref}: Prometheus target has an empty expr")
                else:
                    _, unknown = interpolate_variables(expr, selection, self.builtins(ctx, dash), lambda v: v.values[0])
                    unknown = [n for n in unknown if n not in GLOBAL_VARIABLES]
                    bare = [
                        m.group(1) for m in re.finditer(r"\$([A-Za-z_][A-Za-z0-9_]*)", expr)
                        if m.group(1) not in selection and m.group(1) not in GLOBAL_VARIABLES
                    ]
                    if unknown or bare:
                        result.fail(f"{ref}: undefined variable(s) {', '.join(sorted(set(unknown + bare)))}")
                    else:
                        result.note(f"{ref}: expr {expr}")
                continue
            if ds_type not in SQL_DS_TYPES:
                result.fail(f"{ref}: unsupported data source type {ds_type!r}")
                continue
            self.counts["sql_targets"] += 1
            raw = t.get("rawSql")
            if not isinstance(raw, str) or not raw.strip():
                result.fail(f"{ref}: rawSql is empty")
                continue
            if t.get("rawQuery") is not True or t.get("editorMode") != "code":
                result.fail(f'{ref}: set "rawQuery": true and "editorMode": "code" so Grafana runs rawSql as written')
            fmt = t.get("format", "time_series")
            if fmt not in ("time_series", "table"):
                result.fail(f"{ref}: format must be time_series or table, not {fmt!r}")
                continue
            for label, chosen in self.scenarios(raw, selection, with_all):
                self.run_target(result, ref, label, raw, fmt, chosen, ctx, dash)
        return result

    def scenarios(self, raw: str, first: dict[str, VarValue], with_all: dict[str, VarValue]):
        """The variable selections a target runs with: every variable at its
        first value; and, when the SQL mentions an All-enabled variable,
        every All-enabled variable at All."""
        yield "first values", first
        used = {m.group(1) or m.group(2) or m.group(4) for m in _VARIABLE_RE.finditer(raw)}
        all_vars = sorted(n for n in used if n in with_all and with_all[n].is_all)
        if all_vars:
            yield "All: " + ", ".join("$" + n for n in all_vars), with_all

    def run_target(self, result: Result, ref: str, label: str, raw: str, fmt: str,
                   chosen: dict[str, VarValue], ctx: TimeContext, dash: dict) -> None:
        try:
            sql = self.render_sql(raw, chosen, ctx, dash)
        except (MacroError, ValueError) as exc:
            result.fail(f"{ref} ({label}): interpolation failed: {exc}")
            return
        error, columns, rows = self.run_sql(sql)
        if error:
            result.fail(f"{ref} ({label}): query failed: {error}")
            result.note(f"{ref} SQL sent:\n{sql}")
            return
        problems, summary = check_shape(fmt, columns, rows)
        for problem in problems:
            result.fail(f"{ref} ({label}, {fmt}): {problem}")
        result.note(f"{ref} ({label}, {fmt}, $__interval={ctx.interval_text}): {summary}")
        if problems:
            result.note(f"{ref} SQL sent:\n{sql}")

    # -- dashboards -------------------------------------------------------

    def check_file(self, path: str) -> None:
        rel = os.path.relpath(path, self.args.dashboards)
        try:
            with open(path, encoding="utf-8") as fh:
                dash = json.load(fh)
        except (OSError, json.JSONDecodeError) as exc:
            self.reporter.heading(f"{rel}")
            r = Result("dashboard", rel)
            r.fail(f"cannot read JSON: {exc}")
            self.reporter.emit(r)
            return
        self.counts["dashboards"] += 1
        title = dash.get("title", "?") if isinstance(dash, dict) else "?"
        uid = dash.get("uid", "?") if isinstance(dash, dict) else "?"
        self.reporter.heading(f"{rel}: {title!r} (uid {uid})")
        r = Result("dashboard", "structure")
        for problem in validate_dashboard(dash):
            r.fail(problem)
        if isinstance(uid, str) and uid in self.dashboard_uids:
            r.fail(f"uid {uid!r} is also used by {self.dashboard_uids[uid]}")
        elif isinstance(uid, str):
            self.dashboard_uids[uid] = rel
        self.reporter.emit(r)
        if not isinstance(dash, dict) or not isinstance(dash.get("panels"), list):
            return
        self.unresolved, self.failed_variables = set(), set()
        selection = self.resolve_variables(dash, all_mode=False)
        with_all = self.resolve_variables(dash, all_mode=True)
        for p in all_panels(dash["panels"]):
            if not isinstance(p, dict):
                continue
            self.counts["panels"] += 1
            self.reporter.emit(self.check_panel(p, dash, selection, with_all))

    def run(self) -> int:
        files = sorted(glob.glob(os.path.join(self.args.dashboards, "*.json")))
        print(
            f"Checking {len(files)} dashboard(s) in {self.args.dashboards} against "
            f"{self.args.host}:{self.args.port}, time range {go_rfc3339nano(self.time_from)} .. "
            f"{go_rfc3339nano(self.time_to)}"
        )
        if self.known_ds:
            print("Provisioned data sources: " + ", ".join(f"{u} ({t})" for u, t in sorted(self.known_ds.items())))
        else:
            print("No provisioned data sources found: data source uids are not cross-checked")
        if not files:
            print("FAIL: no dashboards found")
            return 1
        try:
            self.runner.connect()
        except psycopg.Error as exc:
            print(f"FAIL: cannot log in to {self.args.host}:{self.args.port}: {str(exc).strip()}")
            return 1
        try:
            for path in files:
                self.check_file(path)
        finally:
            self.runner.close()
        return self.summary()

    def summary(self) -> int:
        results = self.reporter.results
        failed = [r for r in results if not r.ok]
        panels = [r for r in results if r.kind == "panel"]
        c = self.counts
        print()
        print(
            f"Summary: {c['dashboards']} dashboard(s), {c['variables']} variable(s), "
            f"{len(panels)} panel(s) ({c['sql_targets']} SQL target(s), {c['prom_targets']} Prometheus target(s)); "
            f"{c['sql_runs']} SQL statement(s) run"
        )
        print(
            f"         panels: {sum(r.ok for r in panels)} OK, {sum(not r.ok for r in panels)} FAIL; "
            f"other checks: {sum(r.ok for r in results if r.kind != 'panel')} OK, "
            f"{sum(not r.ok for r in results if r.kind != 'panel')} FAIL"
        )
        if failed:
            print("FAILED")
            return 1
        print("ALL OK")
        return 0


def parse_time(text: str) -> dt.datetime:
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return moment.astimezone(dt.timezone.utc)


def parse_override(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--var wants NAME=VALUE, got {text!r}")
    name, value = text.split("=", 1)
    return name, value


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description="Validate gpuledger's Grafana dashboards and run their SQL against the query service.",
    )
    parser.add_argument("host", help="query service PostgreSQL host")
    parser.add_argument("port", type=int, help="query service PostgreSQL port (--pg-listen)")
    parser.add_argument(
        "password", nargs="?",
        default=os.environ.get("GPULEDGER_QUERY_TOKEN") or "no-token",
        help="an admin or finance token (default: $GPULEDGER_QUERY_TOKEN, else a placeholder)",
    )
    parser.add_argument("--dashboards", default=DEFAULT_DASHBOARDS, help="directory of dashboard JSON (default: %(default)s)")
    parser.add_argument("--from", dest="time_from", default="2026-11-01T00:00:00Z", help="time range start (default: %(default)s)")
    parser.add_argument("--to", dest="time_to", default="2026-12-01T00:00:00Z", help="time range end (default: %(default)s)")
    parser.add_argument("--max-data-points", type=int, default=1000,
                        help="panel width in points, for $__interval (default: %(default)s; a panel's maxDataPoints wins)")
    parser.add_argument("--ds-min-interval", default="1m",
                        help="the SQL data source's minimum interval (Grafana's default: %(default)s)")
    parser.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                        help="fix a variable's value instead of its first option (repeatable)")
    parser.add_argument("--timeout", type=int, default=120, help="statement timeout per query, seconds (default: %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print row counts and columns for passing panels too")
    args = parser.parse_args(argv)
    if psycopg is None:
        print("psycopg 3 is needed: run this with the project's venv, ~/.cache/gpuledger/venv/bin/python", file=sys.stderr)
        return 2
    try:
        return Checker(args).run()
    except psycopg.OperationalError as exc:
        print(f"FAIL: cannot reach the query service at {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
