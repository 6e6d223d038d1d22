"""Lark's analysis of grammar/dl.lark, read out as `Tables` (lang/tables.py).

Lark builds the LALR(1) table; DL drives it with its own loop (`ParseTable.run` in lang/parse.py)
and scans with its own scanner (lang/lexer.py), so what is kept of Lark's result is plain data:
the table's actions, each rule with the options that shape its children, and the terminals. This
is the only module that imports Lark to parse DL, and it runs only when the cache has no table.
"""

from __future__ import annotations

from dl.lang.lexer import LAYOUT_ONLY, Terminal
from dl.lang.tables import START_RULES, Rule, Symbol, Tables
from lark import Lark
from lark.grammar import Rule as LarkRule
from lark.lark import PostLex
from lark.lexer import Lexer, PatternStr, TerminalDef
from lark.parsers.lalr_analysis import Shift


def tables(grammar: str) -> Tables:
    """The tables of `grammar` (the text of grammar/dl.lark), as Lark computes them."""
    lark = Lark(
        grammar,
        parser="lalr",
        lexer=UnusedLexer,
        postlex=LayoutTerminals(),
        start=list(START_RULES),
        maybe_placeholders=True,
    )
    table = lark.parser.parser.parser.parse_table
    index = {rule: number for number, rule in enumerate(lark.rules)}
    states: list[dict[str, int]] = [{} for _ in table.states]
    for state, actions in table.states.items():
        for symbol, (action, argument) in actions.items():
            # Lark's symbol names are `Token`s, which compare slowly as dict keys: use plain strings.
            states[state][str(symbol)] = argument if action is Shift else ~index[argument]
    return Tables(
        states=tuple(states),
        start_states={str(name): state for name, state in table.start_states.items()},
        end_states=tuple(table.end_states.values()),
        rules=tuple(rule(r) for r in lark.rules),
        terminals=tuple(terminal(t) for t in lark.lexer_conf.terminals),
        ignore=tuple(lark.lexer_conf.ignore),
    )


def rule(lark_rule: LarkRule) -> Rule:
    options = lark_rule.options
    expansion = tuple(
        Symbol(str(symbol.name), symbol.is_term, bool(symbol.is_term and symbol.filter_out))
        for symbol in lark_rule.expansion
    )
    return Rule(
        origin=str(lark_rule.origin.name),
        alias=None if lark_rule.alias is None else str(lark_rule.alias),
        expansion=expansion,
        expand1=bool(options.expand1),
        keep_all_tokens=bool(options.keep_all_tokens),
        empty_indices=tuple(bool(absent) for absent in options.empty_indices or ()),
    )


def terminal(definition: TerminalDef) -> Terminal:
    pattern = definition.pattern
    return Terminal(
        name=definition.name,
        value=pattern.value,
        is_string=isinstance(pattern, PatternStr),
        regexp=pattern.to_regexp(),
        priority=definition.priority,
        max_width=pattern.max_width,
    )


class UnusedLexer(Lexer):
    """Lark insists on a lexer; DL's scanner (lang/lexer.py) runs outside Lark."""

    def __init__(self, lexer_conf: object) -> None:
        pass

    def lex(self, *args: object) -> None:
        raise NotImplementedError


class LayoutTerminals(PostLex):
    """Makes Lark keep the terminals that only the layout pass reads (NEWLINE, SEMICOLON)."""

    always_accept = LAYOUT_ONLY

    def process(self, stream: object) -> object:
        return stream
