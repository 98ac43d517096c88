"""The SQL functions users write daily, as DuckDB and Spark spell them (issue 32):
``%``/``mod``, ``round``, ``floor``, ``ceil``; ``concat``, ``||``, ``starts_with``,
``ends_with``, ``contains``, ``regexp_matches``; ``date_trunc``, ``extract`` /
``date_part``, and ``value +/- INTERVAL n unit``.

This module owns both halves: :func:`translate` turns the sqlglot node of one of
these constructs into a :class:`~caslake.expr.nodes.Func` (None for any other
node), and :func:`build` computes such a Func with pyarrow compute for
:class:`~caslake.expr.functions.ValueBuilder`.  Semantics follow DuckDB: ``%``
takes integers, keeps the dividend's sign and gives NULL for a zero divisor;
``round`` rounds half away from zero; ``concat`` skips NULLs while ``||`` gives
NULL; ``regexp_matches`` finds the pattern anywhere (RE2, flag ``i``);
``date_trunc``/``extract`` weeks start on Monday and ``dow`` counts Sunday as 0;
an interval of days, hours, minutes, seconds or weeks moves any date or
timestamp (a date becomes a timestamp, as in DuckDB); months, quarters and years
move only a literal (folded here: the day is clamped to the month's end).
"""

from __future__ import annotations

import calendar
from collections.abc import Callable
from datetime import date, datetime, timedelta
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from caslake.errors import InvalidPredicate, UnsupportedExpression
from caslake.expr.nodes import Func, Literal, Value

_FIXED_US: Final[dict[str, int]] = {
    "microsecond": 1, "millisecond": 1_000, "second": 1_000_000, "minute": 60_000_000,
    "hour": 3_600_000_000, "day": 86_400_000_000, "week": 7 * 86_400_000_000,
}
_TESTS: Final[dict[type[exp.Expression], str]] = {
    exp.StartsWith: "starts_with", exp.EndsWith: "ends_with", exp.Contains: "contains"}
_MONTHS: Final[dict[str, int]] = {"month": 1, "quarter": 3, "year": 12}
_TRUNC: Final = ("year", "quarter", "month", "week", "day", "hour", "minute", "second")
_PARTS: Final[dict[str, Callable[[Any], Any]]] = {
    "year": pc.year, "quarter": pc.quarter, "month": pc.month, "week": pc.iso_week,
    "day": pc.day, "dow": lambda x: pc.day_of_week(x, count_from_zero=True, week_start=7),
    "isodow": lambda x: pc.day_of_week(x, count_from_zero=False, week_start=1),
    "doy": pc.day_of_year, "hour": pc.hour, "minute": pc.minute, "second": pc.second,
}
_PART_ALIASES: Final = {"dayofweek": "dow", "weekday": "dow", "dayofyear": "doy",
                        "years": "year", "months": "month", "days": "day", "hours": "hour",
                        "minutes": "minute", "seconds": "second", "weeks": "week",
                        "quarters": "quarter", "milliseconds": "millisecond",
                        "microseconds": "microsecond"}

# pyarrow-stubs type these kernels narrower than pyarrow accepts (expressions too).
_pc: Any = pc


def _unit(text: str) -> str:
    low = text.strip().lower()
    return _PART_ALIASES.get(low, low)


# --- sqlglot -> Func ---------------------------------------------------------------------


def translate(node: exp.Expression, value: Callable[[exp.Expression], Value]) -> Value | None:
    """The Func of ``node`` if it is one of this module's constructs, else None;
    ``value`` translates an operand."""
    if isinstance(node, (exp.Add, exp.Sub)) and isinstance(node.expression, exp.Interval):
        sign = -1 if isinstance(node, exp.Sub) else 1
        return _interval(value(node.this), node.expression, sign)
    if isinstance(node, exp.Add) and isinstance(node.this, exp.Interval):
        return _interval(value(node.expression), node.this, 1)
    if isinstance(node, exp.Mod):
        return Func("mod", (value(node.this), value(node.expression)))
    if isinstance(node, exp.DPipe):
        return Func("dpipe", (value(node.this), value(node.expression)))
    if isinstance(node, exp.Round):
        digits = node.args.get("decimals")
        return Func("round", (value(node.this),) + (() if digits is None else (value(digits),)))
    if isinstance(node, (exp.Floor, exp.Ceil)):
        if node.args.get("decimals") is not None:
            raise UnsupportedExpression(f"{node.sql_name().lower()}() with digits is not "
                                        f"supported: {node.sql()[:60]}")
        return Func("floor" if isinstance(node, exp.Floor) else "ceil", (value(node.this),))
    if isinstance(node, exp.Concat):
        return Func("concat", tuple(value(a) for a in node.expressions))
    simple = _TESTS.get(type(node))
    if simple is not None:
        return Func(simple, (value(node.this), value(node.expression)))
    if isinstance(node, exp.RegexpLike):
        flag = node.args.get("flag")
        return Func("regexp_matches", (value(node.this), value(node.expression))
                    + (() if flag is None else (value(flag),)))
    if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)):
        return Func("date_trunc", (Literal(_unit(node.text("unit"))), value(node.this)))
    if isinstance(node, exp.Extract):
        return Func("date_part", (Literal(_unit(node.this.name)), value(node.expression)))
    return None


def _interval(base: Value, interval: exp.Interval, sign: int) -> Value:
    """``base + sign * interval``: a literal folded, else an ``add_interval`` Func."""
    amount_text, unit = interval.this.name if interval.this else "", interval.text("unit")
    if not unit and " " in amount_text.strip():  # INTERVAL '3 hours'
        amount_text, unit = amount_text.split(None, 1)
    try:
        amount = int(amount_text)
    except ValueError:
        raise UnsupportedExpression(f"INTERVAL {interval.sql()[9:40]!r}: one whole number "
                                    "and a unit (INTERVAL 7 DAY)") from None
    unit = _unit(unit)
    if unit not in _FIXED_US and unit not in _MONTHS:
        raise UnsupportedExpression(f"INTERVAL unit {unit!r} is not supported (units: "
                                    f"{', '.join([*_FIXED_US, *_MONTHS])})")
    if isinstance(base, Literal) and isinstance(base.value, date):
        return Literal(_shift(base.value, sign * amount, unit))
    if unit in _MONTHS:
        raise UnsupportedExpression(f"INTERVAL {amount} {unit.upper()} moves only a literal "
                                    "date or timestamp; use days on a column")
    return Func("add_interval", (base, Literal(sign * amount * _FIXED_US[unit])))


def _shift(value: date, amount: int, unit: str) -> datetime:
    """``value`` moved by ``amount`` units, as a timestamp (DuckDB's DATE +/- INTERVAL)."""
    moment = value if isinstance(value, datetime) else datetime(value.year, value.month,
                                                                value.day)
    if unit in _FIXED_US:
        return moment + timedelta(microseconds=amount * _FIXED_US[unit])
    months = moment.year * 12 + moment.month - 1 + amount * _MONTHS[unit]
    year, month = divmod(months, 12)
    if not 1 <= year <= 9999:
        raise InvalidPredicate(f"{value} moved by {amount} {unit}(s) is out of range")
    day = min(moment.day, calendar.monthrange(year, month + 1)[1])
    return moment.replace(year=year, month=month + 1, day=day)


# --- Func -> pyarrow compute -------------------------------------------------------------


def build(node: Func, args: list[tuple[Any, Any]], run: Callable[..., tuple[Any, Any]],
          family: Callable[[pa.DataType], str]) -> tuple[Any, Any]:
    """The (target, sample) pair of one of this module's functions; ``run`` is
    ValueBuilder._run, ``family`` functions.type_family."""
    name, what = node.name, f"function {node.name}()"
    kinds = [family(a[1].type) for a in args]
    if name == "mod":
        if set(kinds) != {"int"}:
            raise _takes(what, args, "it takes integers")
        return run(what, _mod, [_as(a, pa.int64(), run, what) for a in args])
    if name in ("round", "floor", "ceil"):
        return _rounding(node, args, run, kinds)
    if name in ("concat", "dpipe"):
        return _concat(node, args, run, kinds)
    if name in ("starts_with", "ends_with", "contains", "regexp_matches"):
        return _text_test(node, args, run, kinds)
    if name in ("date_trunc", "date_part"):
        return _temporal(node, args, run, kinds)
    if name == "add_interval":
        if kinds[0] not in ("date", "timestamp"):
            raise _takes("INTERVAL arithmetic", args[:1], "it takes a date or timestamp")
        base = args[0] if kinds[0] == "timestamp" else _as(args[0], pa.timestamp("us"), run,
                                                            what)
        step = pa.scalar(timedelta(microseconds=_literal(node, 1)), pa.duration("us"))
        return run("INTERVAL arithmetic", lambda x: pc.add_checked(x, step), [base])
    raise InvalidPredicate(f"function {name}() has no implementation")


def _takes(what: str, args: list[tuple[Any, Any]], hint: str) -> InvalidPredicate:
    shown = ", ".join(str(a[1].type) for a in args)
    return InvalidPredicate(f"{what} does not accept ({shown}): {hint}")


def _as(pair: tuple[Any, Any], t: pa.DataType, run: Callable[..., tuple[Any, Any]],
        what: str) -> tuple[Any, Any]:
    return pair if pair[1].type == t else run(what, lambda x: x.cast(t), [pair])


def _literal(node: Func, i: int) -> Any:
    arg = node.args[i]
    if not isinstance(arg, Literal) or arg.value is None:
        raise InvalidPredicate(f"{node.name}() needs a literal as argument {i + 1}, got {arg}")
    return arg.value


def _mod(a: Any, b: Any) -> Any:
    """``a % b`` with the dividend's sign (Arrow divides integers toward zero); NULL
    for a zero divisor."""
    safe = _pc.if_else(_pc.equal(b, 0), pa.scalar(None, pa.int64()), b)
    return pc.subtract(a, pc.multiply(pc.divide(a, safe), safe))


def _rounding(node: Func, args: list[tuple[Any, Any]], run: Callable[..., tuple[Any, Any]],
              kinds: list[str]) -> tuple[Any, Any]:
    what = f"function {node.name}()"
    if kinds[0] not in ("int", "float", "decimal"):
        raise _takes(what, args[:1], "it takes a number")
    if kinds[0] == "int":
        return args[0]  # an integer is its own round, floor and ceil
    if node.name == "round":
        digits = _literal(node, 1) if len(node.args) > 1 else 0
        if not isinstance(digits, int) or isinstance(digits, bool):
            raise InvalidPredicate(f"round() needs an integer literal for its digits, "
                                   f"got {node.args[1]}")
        return run(what, lambda x: pc.round(x, digits, round_mode="half_towards_infinity"),
                   args[:1])
    return run(what, pc.floor if node.name == "floor" else pc.ceil, args)


def _concat(node: Func, args: list[tuple[Any, Any]], run: Callable[..., tuple[Any, Any]],
            kinds: list[str]) -> tuple[Any, Any]:
    what = "the || operator" if node.name == "dpipe" else "function concat()"
    if any(k not in ("string", "int") for k in kinds):
        raise _takes(what, args, "it takes strings (and integers)")
    texts = [_as(a, pa.string(), run, what) for a in args]
    handling = "emit_null" if node.name == "dpipe" else "replace"
    empty = pa.scalar("", pa.string())
    return run(what, lambda *xs: _pc.binary_join_element_wise(
        *xs, empty, null_handling=handling, null_replacement=""), texts)


def _text_test(node: Func, args: list[tuple[Any, Any]], run: Callable[..., tuple[Any, Any]],
               kinds: list[str]) -> tuple[Any, Any]:
    what = f"function {node.name}()"
    if kinds[0] != "string":
        raise _takes(what, args[:1], "it takes a string")
    pattern = _literal(node, 1)
    if not isinstance(pattern, str):
        raise InvalidPredicate(f"{node.name}() needs a string literal, got {node.args[1]}")
    if node.name == "regexp_matches":
        flags = _literal(node, 2) if len(node.args) > 2 else ""
        if not isinstance(flags, str) or set(flags) - {"i", "c"}:
            raise UnsupportedExpression(f"regexp_matches() flags {flags!r}: only 'i' and 'c'")
        fold = flags.rfind("i") > flags.rfind("c")  # the last flag wins
        return run(what, lambda x: pc.match_substring_regex(x, pattern, ignore_case=fold),
                   args[:1])
    fn = {"starts_with": pc.starts_with, "ends_with": pc.ends_with,
          "contains": pc.match_substring}[node.name]
    return run(what, lambda x: fn(x, pattern), args[:1])


def _temporal(node: Func, args: list[tuple[Any, Any]], run: Callable[..., tuple[Any, Any]],
              kinds: list[str]) -> tuple[Any, Any]:
    what = f"function {node.name}()"
    unit = _literal(node, 0)
    if kinds[1] not in ("date", "timestamp"):
        raise _takes(what, args[1:], "it takes a date or timestamp")
    unit = _unit(str(unit))
    if node.name == "date_trunc":
        if unit not in _TRUNC:
            raise UnsupportedExpression(f"date_trunc() unit {unit!r} (units: "
                                        f"{', '.join(_TRUNC)})")
        return run(what, lambda x: _pc.floor_temporal(x, unit=unit, week_starts_monday=True),
                   args[1:])
    part = _PARTS.get(unit)
    if part is None:
        raise UnsupportedExpression(f"extract()/date_part() unit {unit!r} (units: "
                                    f"{', '.join(_PARTS)})")
    return _as(run(what, part, args[1:]), pa.int64(), run, what)
