"""The query language's grammar (lark, LALR(1)) and the parser built from it.

Four statements, after ModelHub's DQL (paper 000, section III-B):

    select m [, EXPR [as LABEL] ...] [where COND] [order by EXPR [asc|desc], ...] [limit N]
    slice m2 from m1 [where ...] mutate m2 = m1["RE"] [and ...] into "PATH" [named "NAME"]
    construct m2 from m1 [where ...] mutate MUTATION, ... into "PATH" [named "NAME"]
    evaluate m from "MODEL" | (select ...) [with K = V, ...]
        vary K in [V, ...] [and ...] [using SEARCH] keep top|bottom(N, m.TEST.METRIC)
        [into "PATH" [named "NAME"]]

Keywords are case-insensitive; `--` starts a comment. lark is imported only
here, and only when the first query is parsed: the filter process and every
other command start without it.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from lark import Lark, Token

GRAMMAR = r"""
start: query
?query: select_q | slice_q | construct_q | evaluate_q

select_q: "select"i projection ("," projection)* where? order? limit?
projection: expr ["as"i label]
?label: NAME | STRING

slice_q: "slice"i NAME "from"i NAME where? order? limit? "mutate"i slice_part ("and"i slice_part)* into
slice_part: ref "=" selector

construct_q: "construct"i NAME "from"i NAME where? order? limit? "mutate"i mutation ("," mutation)* into
?mutation: drop | rename | cast | reinit | copy
drop: "drop"i selector
rename: "rename"i selector "to"i STRING
cast: "cast"i selector "to"i (NAME | STRING)
reinit: "reinit"i selector "with"i NAME "(" init_args? ")" seed?
init_args: number ("," number)*
seed: "seed"i INT
copy: "copy"i STRING "[" STRING "]" ["to"i STRING]

evaluate_q: "evaluate"i NAME "from"i source [settings] vary keep [into]
?source: model_ref | subquery
settings: "with"i setting ("," setting)*
setting: NAME "=" literal
vary: "vary"i axis ("and"i axis)* ["using"i NAME]
axis: NAME "in"i list
keep: "keep"i NAME "(" INT "," ref ")"

into: "into"i STRING ["named"i STRING]

where: "where"i cond
order: "order"i "by"i order_key ("," order_key)*
order_key: expr [direction]
!direction: "asc"i | "desc"i
limit: "limit"i INT

?cond: disjunction
?disjunction: conjunction ("or"i conjunction)*
?conjunction: negation ("and"i negation)*
?negation: "not"i negation -> negated
    | "(" cond ")"
    | predicate
?predicate: compare | exists | lineage
compare: QUANTIFIER? expr cmp_op value
    | QUANTIFIER? expr LIKE STRING
    | QUANTIFIER? expr MATCHES STRING
    | QUANTIFIER? expr IN list
QUANTIFIER: "all"i
LIKE: "like"i
MATCHES: "matches"i
IN: "in"i
!cmp_op: "=" | "==" | "!=" | "<>" | "<" | "<=" | ">" | ">="
exists: selector
lineage: NAME relation "of"i target
    | NAME DERIVED "by"i STRING
    | NAME AT STRING
!relation: "descendant"i | "ancestor"i | "version"i
DERIVED: "derived"i
AT: "at"i
?target: model_ref | subquery
model_ref: STRING
subquery: "(" select_q ")"

?expr: ref | tensor_attr
ref: NAME ("." segment)*
?segment: NAME | STRING
selector: NAME "[" STRING "]"
tensor_attr: selector "." NAME

?value: literal | list
?literal: STRING | number
list: "[" (item ("," item)*)? "]"
?item: literal | STAR
STAR: "*"
number: SIGNED_NUMBER

NAME: /[A-Za-z_][A-Za-z0-9_]*/
STRING: /"(?:[^"\\\n]|\\.)*"/ | /'(?:[^'\\\n]|\\.)*'/
COMMENT: /--[^\n]*/

%import common.INT
%import common.SIGNED_NUMBER
%import common.WS
%ignore WS
%ignore COMMENT
"""


class _Names:
    """Lets the lexer see every identifier whole, whatever the parser state expects.

    lark's contextual lexer only tries the terminals the state accepts; without
    NAME among them, `descending` would lex as the keyword `desc` plus `ending`,
    and `asdf` as `as` `df`. With NAME always tried, a keyword is recognised only
    as a whole word (lark turns a NAME equal to a keyword into that keyword).
    """

    always_accept = ("NAME",)

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        return stream


@cache
def parser() -> Lark:
    """The LALR parser, built once per process (about 0.3 s).

    Not lark's `cache=True`: that reloads the tables with pickle from the shared
    temporary folder, and git-mgit loads no pickle.
    """
    from lark import Lark

    return Lark(
        GRAMMAR,
        parser="lalr",
        postlex=_Names(),
        propagate_positions=True,
        maybe_placeholders=True,
    )
