"""SQL92 message selectors on message properties, as RocketMQ's ``MessageSelector.bySql``
(its broker's ``enablePropertyFilter``; docs/store-format.md §7.2): a consumer receives only the
messages whose properties satisfy the expression, e.g. ``region = 'eu' AND amount > 100``.

The grammar is RocketMQ's (rocketmq-filter's ``SelectorParser.jj``, from ActiveMQ's JMS
selectors): comparisons ``= <> > >= < <=``, ``[NOT] BETWEEN a AND b``, ``[NOT] IN ('a', ...)``,
``IS [NOT] NULL``, ``[NOT] CONTAINS 'x'``, ``AND OR NOT``, parentheses, string ('it''s'),
integer, decimal and boolean literals, ``--`` and ``/* */`` comments; keywords in any case,
property names as written. It is parsed with Lark (LALR), so an error names the column.

Values follow RocketMQ's: a property is a string, compared with a number as that number's
kind (``amount > 100`` with amount ``"250"``), with ``>``/``<`` between two strings as decimals;
a missing property is NULL, and a comparison with NULL is unknown, which never matches (SQL's
three-valued logic: ``NOT`` of unknown is unknown, ``unknown OR true`` is true).

Deviations, each the SQL-92 reading of what RocketMQ's parser does otherwise: ``NOT`` applies
to a whole comparison (``NOT a = 1`` is ``NOT (a = 1)``; RocketMQ binds it to ``a`` and the
expression never matches), and a property that cannot be read as the number it is compared with
makes that comparison unknown (RocketMQ throws, and the whole expression fails to match even
under an ``OR`` that another branch would satisfy).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

MAX_LENGTH = 4096  # characters of one expression
MAX_DEPTH = 64  # levels of nesting (parentheses, NOT, a sign)

GRAMMAR = r"""
?start: or_expr

?or_expr: and_expr (_OR and_expr)*                  -> or_
?and_expr: not_expr (_AND not_expr)*                -> and_
?not_expr: _NOT not_expr                            -> not_
         | predicate
?predicate: operand
          | operand EQ operand                      -> eq
          | operand NE operand                      -> ne
          | operand CMP operand                     -> cmp
          | operand _IS _NULL                       -> is_null
          | operand _IS _NOT _NULL                  -> is_not_null
          | operand _BETWEEN operand _AND operand   -> between
          | operand _NOT _BETWEEN operand _AND operand -> not_between
          | operand _IN "(" string ("," string)* ")"  -> in_
          | operand _NOT _IN "(" string ("," string)* ")" -> not_in
          | operand _CONTAINS string                -> contains
          | operand _NOT _CONTAINS string           -> not_contains
?operand: "+" operand
        | MINUS operand                             -> neg
        | primary
?primary: string
        | INTEGER                                   -> integer
        | DECIMAL                                   -> decimal
        | _TRUE                                     -> true
        | _FALSE                                    -> false
        | _NULL                                     -> null
        | ID                                        -> prop
        | "(" or_expr ")"
string: STRING

EQ: "="
NE.3: "<>"
CMP: ">=" | "<=" | ">" | "<"
MINUS: "-"
_OR: "OR"i
_AND: "AND"i
_NOT: "NOT"i
_IS: "IS"i
_NULL: "NULL"i
_BETWEEN: "BETWEEN"i
_IN: "IN"i
_CONTAINS: "CONTAINS"i
_TRUE: "TRUE"i
_FALSE: "FALSE"i
ID: /[a-z_$][a-z0-9_$]*/i
DECIMAL.2: /([0-9]+\.[0-9]*|\.[0-9]+)(e[+-]?[0-9]+)?/i | /[0-9]+e[+-]?[0-9]+/i
INTEGER: /(0|[1-9][0-9]*)l?/i
STRING: /'([^']|'')*'/
COMMENT: /--[^\n\r]*/ | /\/\*(.|\n)*?\*\//

%import common.WS
%ignore WS
%ignore COMMENT
"""

Value = Any  # str | int | float | bool | None
Evaluate = Callable[[Mapping[str, str]], Value]


class SelectorError(ValueError):
    """An expression that is not a selector; ``column`` is 1-based (0: the whole expression)."""

    def __init__(self, column: int, reason: str):
        super().__init__(f"column {column}: {reason}" if column else reason)
        self.column = column
        self.reason = reason


class Selector:
    """A compiled expression: ``matches(properties)`` is True only when it evaluates to true."""

    __slots__ = ("text", "_evaluate")

    def __init__(self, text: str, evaluate: Evaluate):
        self.text = text
        self._evaluate = evaluate

    def matches(self, properties: Mapping[str, str]) -> bool:
        try:
            return self._evaluate(properties) is True
        except (ArithmeticError, ValueError, TypeError):  # (as RocketMQ: a message it cannot evaluate does not match)
            return False

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"


@functools.lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(GRAMMAR, parser="lalr", propagate_positions=True, maybe_placeholders=False)


@functools.lru_cache(maxsize=256)  # (a consumer sends the same expression with every receive)
def compile_selector(text: str) -> Selector:
    """Raises SelectorError naming the column of what is wrong."""
    if not text.strip():
        raise SelectorError(0, "an empty expression selects nothing: leave the filter out to take every message")
    if len(text) > MAX_LENGTH:
        raise SelectorError(0, f"{len(text)} characters; at most {MAX_LENGTH}")
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as e:
        at_end = isinstance(e, UnexpectedEOF) or (isinstance(e, UnexpectedToken) and e.token.type == "$END")
        column = len(text.rstrip()) + 1 if at_end or not (e.column and e.column > 0) else e.column
        raise SelectorError(column, _syntax_reason(e)) from None
    if _depth(tree) > MAX_DEPTH:  # (compiling and evaluating recurse once per level)
        raise SelectorError(0, f"nested more than {MAX_DEPTH} deep")
    try:
        node = _Compile().transform(tree)
    except VisitError as e:
        if isinstance(e.orig_exc, SelectorError):
            raise e.orig_exc from None
        raise
    return Selector(text, _as_condition(node))


def _depth(tree: Tree[Token]) -> int:
    """How deep the parse tree is, without recursion."""
    deepest = 0
    stack: list[tuple[Tree[Token], int]] = [(tree, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((c, d + 1) for c in node.children if isinstance(c, Tree))
    return deepest


def _syntax_reason(e: UnexpectedInput) -> str:
    if isinstance(e, UnexpectedEOF):
        return "the expression ends too early"
    if isinstance(e, UnexpectedCharacters):
        return f"unexpected character {e.char!r}"
    if isinstance(e, UnexpectedToken):
        tok = e.token
        if tok.type == "$END":
            return "the expression ends too early"
        expected = sorted({_readable(t) for t in e.expected})
        hint = f" (expected {', '.join(expected[:6])}{', ...' if len(expected) > 6 else ''})" if expected else ""
        return f"unexpected {str(tok)!r}{hint}"
    return str(e).splitlines()[0]


_NAMES = {
    "LPAR": "(",
    "RPAR": ")",
    "COMMA": ",",
    "PLUS": "+",
    "MINUS": "-",
    "EQ": "=",
    "NE": "<>",
    "CMP": "a comparison",
    "STRING": "a string",
    "INTEGER": "a number",
    "DECIMAL": "a number",
    "ID": "a property",
    "$END": "the end",
}


def _readable(terminal: str) -> str:
    return _NAMES.get(terminal, terminal.lstrip("_"))


class _Node:
    """A compiled sub-expression: its evaluation, what kind of value it gives (``bool``,
    ``prop``, ``const``, ``num``) and, for a literal, the value."""

    __slots__ = ("evaluate", "kind", "value", "column")

    def __init__(self, evaluate: Evaluate, kind: str, value: Value = None, column: int = 0):
        self.evaluate = evaluate
        self.kind = kind
        self.value = value
        self.column = column


def _shown(value: Value) -> str:
    """A literal as it is written in an expression."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def _const(value: Value, column: int) -> _Node:
    return _Node(lambda _p: value, "const", value, column)


def _as_condition(node: _Node) -> Evaluate:
    """A sub-expression used as a condition: a property alone is true only when it says so
    (RocketMQ casts it, and a property, always a string, is never its boolean TRUE)."""
    if node.kind == "bool":
        return node.evaluate
    if node.kind == "prop":
        get = node.evaluate
        return lambda p: None if get(p) is None else False
    if node.kind == "const" and isinstance(node.value, bool):
        return node.evaluate
    shown = _shown(node.value) if node.kind == "const" else "a number"
    raise SelectorError(node.column, f"{shown} is a value, not a condition")


def _number_of(text: str, like: Value) -> Value:
    """A property read as the kind of number it is compared with (None when it is not one)."""
    try:
        if text != text.strip():
            return None
        return int(text[:-1] if text[-1:] in "lL" else text) if isinstance(like, int) else float(text)
    except (ValueError, IndexError):
        return None


def _coerce(lv: Value, rv: Value) -> tuple[Value, Value] | None:
    """Both values of one kind, as RocketMQ converts them (a string to the other side's number
    or boolean; an integer to a decimal); None when they cannot be."""
    lt, rt = type(lv), type(rv)
    if lt is rt:
        return lv, rv
    if lt is str and rt is bool:
        return lv.lower() == "true", rv
    if lt is bool and rt is str:
        return lv, rv.lower() == "true"
    if lt is str and rt in (int, float):
        n = _number_of(lv, rv)
        return None if n is None else (n, rv)
    if rt is str and lt in (int, float):
        n = _number_of(rv, lv)
        return None if n is None else (lv, n)
    if {lt, rt} == {int, float}:
        try:
            return float(lv), float(rv)
        except OverflowError:  # (an integer beyond any float)
            return None
    return None


def _equal(lv: Value, rv: Value) -> Value:
    if lv is None:
        return None
    if rv is None:
        return False
    pair = _coerce(lv, rv)
    return None if pair is None else pair[0] == pair[1]  # (a property that is not the number: unknown)


_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
}


def _order(op: str) -> Callable[[Value, Value], Value]:
    test = _ORDER[op]

    def compare(lv: Value, rv: Value) -> Value:
        if lv is None or rv is None:
            return None
        if type(lv) is str and type(rv) is str:  # (two strings: as decimals, as RocketMQ does)
            lv, rv = _number_of(lv, 0.0), _number_of(rv, 0.0)
            return None if lv is None or rv is None else test(lv, rv)
        pair = _coerce(lv, rv)
        if pair is None or isinstance(pair[0], bool):
            return None
        return test(pair[0], pair[1])

    return compare


def _orderable(node: _Node, op: str) -> None:
    """RocketMQ's ``checkLessThanOperand``: only numbers (and properties) are ordered."""
    if node.kind == "bool":
        raise SelectorError(node.column, f"a condition cannot be compared with {op}: only numbers are ordered")
    v = node.value
    if node.kind == "const" and (not isinstance(v, (int, float)) or isinstance(v, bool)):
        raise SelectorError(node.column, f"{_shown(v)} cannot be compared with {op}: only numbers are ordered")


def _column(meta: Any) -> int:
    return getattr(meta, "column", 0) or 0


@v_args(meta=True, inline=True)
class _Compile(Transformer[Token, _Node]):
    """The parse tree into nested closures over a message's properties."""

    # ------------------------------------------------------------ values

    def string(self, meta: Any, tok: Token) -> _Node:
        return _const(str(tok)[1:-1].replace("''", "'"), _column(meta))

    def integer(self, meta: Any, tok: Token) -> _Node:
        text = str(tok)
        return _const(int(text[:-1] if text[-1] in "lL" else text), _column(meta))

    def decimal(self, meta: Any, tok: Token) -> _Node:
        return _const(float(str(tok)), _column(meta))

    def true(self, meta: Any) -> _Node:
        return _const(True, _column(meta))

    def false(self, meta: Any) -> _Node:
        return _const(False, _column(meta))

    def null(self, meta: Any) -> _Node:
        return _const(None, _column(meta))

    def prop(self, meta: Any, tok: Token) -> _Node:
        name = str(tok)
        return _Node(lambda p: p.get(name), "prop", name, _column(meta))

    def neg(self, meta: Any, _minus: Token, node: _Node) -> _Node:
        if node.kind == "const":
            if not isinstance(node.value, (int, float)) or isinstance(node.value, bool):
                raise SelectorError(node.column, f"{_shown(node.value)} cannot be negated")
            return _const(-node.value, _column(meta))
        inner = node.evaluate

        def negate(p: Mapping[str, str]) -> Value:
            v = inner(p)
            return -v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        return _Node(negate, "num", None, _column(meta))

    # ------------------------------------------------------------ comparisons

    def _check_equal(self, left: _Node, right: _Node, op: str) -> None:
        for n in (left, right):
            if n.kind == "const" and n.value is None:
                raise SelectorError(n.column, f"NULL cannot be compared with {op}: use IS NULL or IS NOT NULL")

    def eq(self, meta: Any, left: _Node, _op: Token, right: _Node) -> _Node:
        self._check_equal(left, right, "=")
        lf, rf = left.evaluate, right.evaluate
        return _Node(lambda p: _equal(lf(p), rf(p)), "bool", column=_column(meta))

    def ne(self, meta: Any, left: _Node, _op: Token, right: _Node) -> _Node:
        self._check_equal(left, right, "<>")
        lf, rf = left.evaluate, right.evaluate

        def not_equal(p: Mapping[str, str]) -> Value:
            v = _equal(lf(p), rf(p))
            return None if v is None else not v

        return _Node(not_equal, "bool", column=_column(meta))

    def cmp(self, meta: Any, left: _Node, op: Token, right: _Node) -> _Node:
        _orderable(left, str(op))
        _orderable(right, str(op))
        compare = _order(str(op))
        lf, rf = left.evaluate, right.evaluate
        return _Node(lambda p: compare(lf(p), rf(p)), "bool", column=_column(meta))

    def is_null(self, meta: Any, node: _Node) -> _Node:
        f = node.evaluate
        return _Node(lambda p: f(p) is None, "bool", column=_column(meta))

    def is_not_null(self, meta: Any, node: _Node) -> _Node:
        f = node.evaluate
        return _Node(lambda p: f(p) is not None, "bool", column=_column(meta))

    def _between(self, meta: Any, node: _Node, low: _Node, high: _Node) -> Evaluate:
        for n in (node, low, high):
            _orderable(n, "BETWEEN")
        if low.kind == "const" and high.kind == "const":
            if low.value is None or high.value is None:
                raise SelectorError(_column(meta), "BETWEEN needs two values, not NULL")
            if low.value > high.value:
                raise SelectorError(low.column, f"BETWEEN {low.value} AND {high.value}: the first value must not be above the second")
        ge, le = _order(">="), _order("<=")
        f, lo, hi = node.evaluate, low.evaluate, high.evaluate
        return _connective([lambda p: ge(f(p), lo(p)), lambda p: le(f(p), hi(p))], False)

    def between(self, meta: Any, node: _Node, low: _Node, high: _Node) -> _Node:
        return _Node(self._between(meta, node, low, high), "bool", column=_column(meta))

    def not_between(self, meta: Any, node: _Node, low: _Node, high: _Node) -> _Node:
        inside = self._between(meta, node, low, high)
        return _Node(lambda p: _not(inside(p)), "bool", column=_column(meta))

    def _in(self, meta: Any, node: _Node, items: tuple[_Node, ...], negated: bool) -> _Node:
        if node.kind != "prop":
            raise SelectorError(node.column, "IN applies to a property (name IN ('a', 'b'))")
        values = frozenset(i.value for i in items)
        f = node.evaluate

        def member(p: Mapping[str, str]) -> Value:
            v = f(p)
            return None if v is None else (v in values) != negated

        return _Node(member, "bool", column=_column(meta))

    def in_(self, meta: Any, node: _Node, *items: _Node) -> _Node:
        return self._in(meta, node, items, False)

    def not_in(self, meta: Any, node: _Node, *items: _Node) -> _Node:
        return self._in(meta, node, items, True)

    def _contains(self, meta: Any, node: _Node, part: _Node, negated: bool) -> _Node:
        if node.kind != "prop":
            raise SelectorError(node.column, "CONTAINS applies to a property (name CONTAINS 'x')")
        f, text = node.evaluate, part.value

        def contains(p: Mapping[str, str]) -> Value:
            v = f(p)
            return None if v is None else (text in v) != negated

        return _Node(contains, "bool", column=_column(meta))

    def contains(self, meta: Any, node: _Node, part: _Node) -> _Node:
        return self._contains(meta, node, part, False)

    def not_contains(self, meta: Any, node: _Node, part: _Node) -> _Node:
        return self._contains(meta, node, part, True)

    # ------------------------------------------------------------ logic

    def not_(self, meta: Any, node: _Node) -> _Node:
        f = _as_condition(node)
        return _Node(lambda p: _not(f(p)), "bool", column=_column(meta))

    def and_(self, meta: Any, *nodes: _Node) -> _Node:
        return _Node(_connective([_as_condition(n) for n in nodes], False), "bool", column=_column(meta))

    def or_(self, meta: Any, *nodes: _Node) -> _Node:
        return _Node(_connective([_as_condition(n) for n in nodes], True), "bool", column=_column(meta))


def _connective(terms: list[Evaluate], decisive: bool) -> Evaluate:
    """AND (``decisive`` False) or OR (True) in three-valued logic: one term with the decisive
    value decides; else any unknown term makes it unknown; else it is the other value."""

    def combine(p: Mapping[str, str]) -> Value:
        out: Value = not decisive
        for term in terms:
            v = term(p)
            if v is decisive:
                return decisive
            if v is None:
                out = None
        return out

    return combine


def _not(v: Value) -> Value:
    return None if v is None else not v
