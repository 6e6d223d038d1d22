"""What users bring from Python, NumPy and PyTorch, and DL's spelling of it: the help of the diagnostic for a
name DL does not have (`True`, `None`, `np.zeros(3)`, `unsqueeze(x, 0)`, `x.view(3, 1)`) or a word its grammar
does not (`def`, `elif`). One table; the checker and the parser read it.
"""

from __future__ import annotations

from collections.abc import Callable

from dl.lang import ast
from dl.lang.primitives import BY_NAME, PRIMITIVES
from dl.lang.printer import ATOM, precedence, print_expr

BUILT_INS = frozenset(BY_NAME)  # what a NumPy or PyTorch call of the same name is in DL
# Names of the modules such code calls through (`np.zeros(3)`, `F.relu(x)`): DL's built-ins need none.
FOREIGN_MODULES = frozenset({"np", "numpy", "torch", "jnp", "jax", "F", "math", "tf", "scipy"})
# DL's standard library, which a program imports before use (docs/stdlib.md).
STDLIB = frozenset({"nn", "optim", "data"})

# Values Python spells otherwise.
NAMES = {
    "True": "help: DL writes the booleans `true` and `false`",
    "False": "help: DL writes the booleans `true` and `false`",
    "None": "help: DL has no `None`: an axis of size 1 is added with `expand_dims(x, axis)`, and a variable holds "
    "a value from its `let` on (`let best = 1e9`)",
    "self": "help: DL has no methods: a function takes the struct it works on as a parameter",
    # numpy's and torch's constants (`np.pi`, `torch.inf`): an unsuffixed literal takes its uses' dtype
    "pi": "help: DL has no `pi` constant: write `3.141592653589793`, which takes the dtype of what it meets "
    "(a `const` would be an f32)",
    "inf": "help: DL writes infinity as a literal too large for any dtype: `1e400` (and `-1e400`)",
    "nan": "help: DL has no `nan` constant: `0.0 / 0.0` is one",
    # torch's functions DL spells otherwise
    "chunk": "help: DL has no `chunk`: slice the axis into its pieces, `x[..., 0:n]`, `x[..., n:2 * n]`, ... (n the "
    "size of a piece; `split_like(x, (a, b), axis)` cuts it as long as the tensors `a` and `b`)",
    "randint": "help: DL has no `randint`: `int(rand(n) * float(high))` draws n integers from 0 to high - 1 (`seed=` "
    "as for `rand`), and `permutation(n)` shuffles 0..n",
    "norm": "help: the Euclidean norm along an axis is `nn.norm(x, axis=-1)` (`import nn`); of all of `x`, "
    "`sqrt(sum(x * x))`",
}
DTYPE_NAMES = {"float32": "f32", "float64": "f64", "double": "f64", "int64": "i64", "long": "i64", "int32": "i32"}
DTYPES_HELP = "help: DL's dtypes are `f32`, `f64`, `i32`, `i64` and `bool`"
NAMES |= {name: f"{DTYPES_HELP}: `{dtype}`" for name, dtype in DTYPE_NAMES.items()}

# Types other languages name that DL spells otherwise (an annotation's unknown type).
TYPES = {
    **{name: f"{DTYPES_HELP}: `{dtype}`" for name, dtype in DTYPE_NAMES.items()},
    "float": f"{DTYPES_HELP}: a float scalar is `f32` (or `f64`)",
    "int": f"{DTYPES_HELP}: an integer scalar is `i64`",
    "Tensor": "help: a tensor's type is its dtype and shape: `f32[B, 784]`",
    "void": "help: a function that returns nothing has no `->` (its result is `()`)",
    "None": "help: a function that returns nothing has no `->` (its result is `()`)",
}

# Words of Python's grammar, at the place DL's grammar rejects them.
WORDS = {
    "def": "help: DL declares a function with `fn name(params) { ... }`",
    "elif": "help: DL writes `elif` as `else if`",
    "class": "help: DL declares data with `struct Name { field: type }`, and functions apart with `fn`",
    "lambda": "help: DL writes an anonymous function `fn(x) => x * 2.0`",
    "pass": "help: an empty block is `{}`",
    "from": "help: DL imports a module with `import name`, and names what it declares `name.item`",
    "is": "help: DL compares with `==` and `!=`",
}
NAMES["pass"] = WORDS["pass"]  # (a statement of its own: DL reads it as a name)

# Characters of C's and Python's operators that no DL token has.
CHARACTERS = {
    "&": "help: DL writes `&&` as `and`",
    "|": "help: DL writes `||` as `or`",
    "!": "help: DL writes `!x` as `not x` (and `!=` compares)",
    "^": "help: DL raises to a power with `**`",
    "'": 'help: DL writes strings in double quotes: `"hello"`',
}

# `x[x > 0]`: a shape says how many elements a value has before it runs; a mask's count is known only then.
MASK_INDEX = (
    "help: a mask selects a number of elements known only when the program runs, which no shape can say: keep "
    "the shape with `where(mask, x, 0.0)` (and `sum(where(mask, x, 0.0))` to total the selected ones)"
)
# torch's `x[mask]` for the rows themselves: their positions, first in a stable sort, as many as the mask holds
MASK_ROWS = (
    "help: to take the selected rows in order (as many as the mask holds: a size `_`, known when it runs), "
    "gather their positions: `gather(x, argsort(where(mask, 0, 1))[0:sum(mask)], axis=0)`"
)
# Reductions Python calls with two values: DL's take one tensor; the element-wise ones have other names.
PAIRWISE = {"max": ("maximum", "larger"), "min": ("minimum", "smaller")}


def binding_help(name: str, call: ast.Call) -> tuple[str, ...]:
    """The help for a call of the built-in `name` that does not bind: Python's `max(a, b)` is `maximum(a, b)`,
    NumPy's `sum(x, 1)` is `sum(x, axis=1)`, `torch.cat(a, b)`'s tensors are one tuple, `concat((a, b))`."""
    if name in PAIRWISE and len(call.args) == 2 and not call.keywords:
        function, which = PAIRWISE[name]
        pair = ", ".join(shown(a) for a in call.args)
        return (f"help: `{name}` reduces one tensor; the {which} of two, element by element, is `{function}({pair})`",)
    if name == "gather" and len(call.args) == 3 and not call.keywords:  # PyTorch's gather(x, dim, index)
        x, axis, indices = shown(call.args[0]), shown(call.args[1]), print_expr(call.args[2])  # indices: a tensor
        return (
            f"help: DL's `gather` is numpy's `take`; PyTorch's `gather` is `take_along_axis({x}, {indices}, {axis})`",
        )
    if name == "pad" and len(call.args) >= 2 and isinstance(call.args[1], (ast.TupleLiteral, ast.TensorLiteral)):
        return padding_help(call)
    key = next((k for k in call.keywords if k.name in ("key", "generator", "rng")), None)
    if key is not None and name in BY_NAME and "seed" in PRIMITIVES[BY_NAME[name]].signature.keyword_names:
        return (  # JAX's `key=`, PyTorch's `generator=`
            f"help: DL's random draws take an integer `seed=`: `{name}(..., seed={shown(key.value)})` draws the same "
            "numbers for the same seed; left out, draws come from the run's generator, seeded 0 as the run starts",
        )
    decimals = (
        call.args[1] if len(call.args) == 2 else next((k.value for k in call.keywords if k.name == "decimals"), None)
    )
    if name == "round" and decimals is not None:  # numpy's `round(x, 2)`, torch's `round(x, decimals=2)`
        scale = f"{10**decimals.value}.0" if isinstance(decimals, ast.IntLiteral) and decimals.value < 16 else "s"
        x = shown(call.args[0]) if call.args else "x"
        x = f"({x})" if call.args and isinstance(call.args[0], (ast.Binary, ast.Unary)) else x
        return (f"help: `round` rounds to whole numbers; to decimals, scale first: `round({x} * {scale}) / {scale}`",)
    signature = PRIMITIVES[BY_NAME[name]].signature if name in BY_NAME else None
    if signature is None or signature.variadic is not None:
        return ()
    given = [shown(a) for a in call.args]
    named = [dl_keyword(k) for k in call.keywords]
    unbiased = next((k for k in call.keywords if k.name == "unbiased"), None)
    if unbiased is not None and "correction" in signature.keyword_names:
        return (f"help: torch's `unbiased=` is DL's `correction=`: `{dl_keyword(unbiased)}`",)
    if signature.positional == ("tensors",) and len(given) > 1:
        items = ", ".join([f"({', '.join(given)})", *named])
        return (f"help: `{name}` takes one tuple of tensors: `{name}({items})`",)
    allowed = len(signature.positional) + len(signature.optional)
    extra = given[allowed:]
    free = [k for k in signature.keyword_names if k not in {k.name for k in call.keywords}]
    if extra and len(extra) <= len(free) and free[0] == "axis":
        spelled = [*given[:allowed], *(f"{k}={v}" for k, v in zip(free, extra, strict=False)), *named]
        return (f"help: `{name}`'s `{free[0]}` is given by name: `{name}({', '.join(spelled)})`",)
    return ()


def padding_help(call: ast.Call) -> tuple[str, ...]:
    """torch's `pad(x, (left, right, top, bottom))` (pairs from the last axis back; its `mode` and `value`
    may follow by position) and numpy's `pad(x, ((0, 0), (1, 2)))` (a pair per axis from the first) as DL's
    calls, one axis each. A flat pair with `axis=` given pads that axis."""
    items = call.args[1].items  # type: ignore[attr-defined]
    pairs_of = (ast.TupleLiteral, ast.TensorLiteral)
    axis = next((k.value for k in call.keywords if k.name in ("axis", "dim")), None)
    if len(items) > 1 and all(isinstance(item, pairs_of) and len(item.items) == 2 for item in items):
        pairs = [(k, *(shown(w) for w in item.items)) for k, item in enumerate(items)]
        style = "numpy's"
    elif items and len(items) % 2 == 0 and not any(isinstance(item, pairs_of) for item in items):
        widths = [shown(item) for item in items]
        pairs = [(-1 - k, widths[2 * k], widths[2 * k + 1]) for k in range(len(items) // 2)]
        if axis is not None and len(pairs) == 1:
            pairs = [(shown(axis), *pairs[0][1:])]
        style = "torch's"
    else:
        return ()  # numpy's one pair for every axis, `((1, 2),)`: the rank is not known here
    value = next((k.value for k in call.keywords if k.name in ("value", "constant_values")), None)
    if value is None and len(call.args) == 4:  # torch's `pad(x, widths, "constant", 0.5)`
        value = call.args[3]
    if isinstance(value, pairs_of):  # numpy's `constant_values=(before, after)`: DL fills with one value
        value = None
    written = shown(call.args[0])
    pairs = [pair for pair in pairs if pair[1:] != ("0", "0")]
    if not pairs:
        return ()
    if len(pairs) > 1 and len({pair[1:] for pair in pairs}) == 1:  # the same widths: one call, a tuple of axes
        pairs = [(f"({', '.join(str(pair[0]) for pair in pairs)})", *pairs[0][1:])]
    for axis, before, after in pairs:
        fill = f", value={shown(value)}" if value is not None else ""
        written = f"pad({written}, {before}, {after}, axis={axis}{fill})"
    return (
        f"help: DL's `pad` takes the widths before and after one axis (or a tuple of axes), not {style} tuple of "
        f"them: `{written}`",
    )


def syntax_help(
    before: list, found: tuple, expected: set[str], following: list = (), opening: str = ""
) -> tuple[str, ...]:
    """The help for a token DL's grammar rejects (`found`, after the tokens `before`, the last three of them
    at most, where the grammar takes the terminals `expected`): a Python word there or just before (`def`,
    `elif x`), a block opened with `:`, a result type after `:`, a range `0:3`, or C's `i++`."""
    brace_expected = "LBRACE" in expected
    words = tuple(WORDS[t[1]] for t in (*before[-1:], found) if t[0] == "NAME" and t[1] in WORDS)
    previous = before[-1] if before else ("", "")
    if not words and previous[0] == "NAME" and found[0] in NAME_LIKE:
        thing = found[1] if found[0] == "NAME" else "x"
        if previous[1] == "var" or (previous[1] == "mut" and len(before) > 1 and before[-2][1] == "let"):
            return (f"help: DL declares a variable with `let {thing} = ...`, and any variable can be assigned again",)
        if previous[1] == "print":
            return (f"help: `print` is a function: `print({found[1]})`",)
    top_level = "FN" in expected and "STRUCT" in expected and "LBRACE" not in expected
    assigned = found[0] == "NAME" and bool(following) and following[0][1] == "="
    if not words and top_level and (found[1] in ("let", "var") or assigned):
        named = found[1] not in ("let", "var") or (bool(following) and following[0][0] == "NAME")
        thing = (following[0][1] if found[1] in ("let", "var") else found[1]) if named else "name"
        return (f"help: a value outside functions is a constant: `const {thing} = ...`",)
    if not words and top_level and found[0] == "NAME":
        return ("help: statements go inside a function: `fn main() { ... }` is what `dlrun` runs",)
    if not words and found[1] == "if" and previous[0] in ("NAME", "INT", "FLOAT", "RPAR", "RSQB"):  # `a if c else b`
        return (
            "help: DL has no conditional expression `a if c else b`: choose elementwise with `where(c, a, b)`, or "
            "write an `if` statement: `let y = b` then `if c { y = a }`",
        )
    if not words and found[1] == "=" and previous[1] == "..":
        return ("help: a range leaves out its end: `a..b + 1` counts to `b`",)
    declaring_two = opening in ("let", "var") and len(before) > 1 and before[-2][1] in ("let", "var")
    if not words and found[1] == "," and declaring_two and previous[0] == "NAME":
        return (f"help: DL takes a tuple apart in parentheses: `let ({previous[1]}, ...) = ...`",)
    if not words and found[1] == "," and opening == "return":
        return ("help: DL returns several values as one tuple: `return (a, b)`",)
    if not words and previous[1] == "assert" and found[0] in NAME_LIKE | {"LPAR", "MINUS", "NOT"}:
        return ('help: `assert` is a function: `assert(x > 0.0, "message")`',)
    if not words and found[1] in ("//", "/") and opening in ("", "//", "/") and previous[1] in ("", "{", "}"):
        return ("help: DL's comments start with `#`",)
    if not words and found[1] == "=" and opening in ("if", "while") and "LBRACE" in expected:
        return ("help: compare with `==`; `=` assigns",)
    fields = len(following) == 2 and following[0][0] == "NAME" and following[1][1] == "="
    in_expression = opening not in ("", "fn", previous[1])  # `let p = P {`, not `fn main {` or `loop {`
    if not words and found[1] == "{" and previous[0] == "NAME" and fields and in_expression:  # `P { x = 1.0 }`
        return (f"help: DL writes a struct's fields with `:`: `{previous[1]} {{ {following[0][1]}: ... }}`",)
    if not words and found[1] == ":" and "ARROW" in expected and opening != "fn":  # `fn(x): x * 2.0`
        return ("help: DL writes an anonymous function `fn(x) => x * 2.0`, or with a block `fn(x) { ... }`",)
    if not words and found[1] == ":" and "ARROW" in expected:
        return ("help: DL writes a function's result type after `->`: `fn f(x: f32) -> f32 { ... }`",)
    if not words and found[1] == ":" and len(before) > 1 and before[-2][1] == "in" and previous[0] == "INT":
        return (f"help: DL writes a range `{previous[1]}..b`: `for i in 0..3` counts 0, 1 and 2",)
    if not words and found[1] == ":" and brace_expected:
        return ("help: DL puts a block in braces, not after `:`: `if x > 0 { ... }`",)
    if not words and found[1] == "," and len(before) > 1 and before[-2][1] == "for":
        return ("help: DL takes a loop's values apart in parentheses: `for (i, x) in ...`",)
    if not words and found[1] == "=" and previous[1] in ("%", "//", "**", "@") and len(before) > 1:
        operator, target = previous[1], before[-2][1] if before[-2][0] == "NAME" else "x"
        return (f"help: DL has no `{operator}=`: write `{target} = {target} {operator} ...`",)
    if not words and found[1] == ".." and "for" not in [t[1] for t in before]:
        return ("help: `a..b` is a range of a `for` loop only (`for i in a..b`); `arange(a, b)` is a tensor of them",)
    if not words and found[1] in ("+", "-") and before and before[-1][1] == found[1]:
        counter = before[-2][1] if len(before) > 1 and before[-2][0] == "NAME" else "i"
        return (f"help: DL has no `{found[1] * 2}`: write `{counter} {found[1]}= 1`",)
    after_a_value = before and before[-1][1] not in ("{", "}", ";") and before[-1][0] != "NEWLINE"
    if not words and found[1] == "for" and after_a_value:
        return (COMPREHENSION,)
    declaring = len(before) > 2 and before[-3][1] == "fn"  # `fn f( {`: a parameter list left open
    if not words and found[1] == "{" and not brace_expected and before and before[-1][1] in ("=", "(", ",", "return"):
        return () if declaring else (DICTIONARY,)
    return words


# The tokens that start a value: `var x`, `print x` (a word DL does not have, or a function, before one)
NAME_LIKE = frozenset({"NAME", "INT", "FLOAT", "STRING", "FSTRING"})

# `[x * 2.0 for x in xs]` and `{"lr": 0.1}`: Python's comprehensions and dictionaries
COMPREHENSION = (
    "help: DL has no comprehensions: operators and built-ins apply to whole tensors (`xs * 2.0`, `exp(xs)`); "
    "for anything else write a `for` loop"
)
DICTIONARY = (
    "help: DL has no dictionaries: a struct holds named values (`struct Config { lr: f32, epochs: i64 }`, "
    "made with `Config { lr: 0.1, epochs: 3 }`)"
)


def dtype_call_help(dtype: str, call: ast.Call) -> tuple[str, ...]:
    """`f32(3, 4)` or `f32(x)`: a dtype names no constructor in DL (nor does `torch.float32` in PyTorch)."""
    dims = ", ".join(print_expr(a) for a in call.args) or "3, 4"
    make = f"a tensor of it is `zeros({dims}, dtype={dtype})` (or `ones`, `randn`, `full`)"
    converted = {"f32": "float(x)", "f64": "float(x, dtype=f64)", "i64": "int(x)"}.get(dtype)
    convert = f", and `{converted}` converts a value to it" if converted else ""
    return (f"help: `{dtype}` names a dtype: {make}{convert}",)


# The built-ins that take dimensions, each as its own argument.
CREATION = frozenset({"zeros", "ones", "full", "randn", "rand"})
# PyTorch's and NumPy's keywords that DL spells otherwise.
KEYWORDS = {"dim": "axis", "keepdim": "keepdims", "ddof": "correction"}


def dl_keyword(keyword: ast.Keyword) -> str:
    """A keyword argument as DL spells it: `dim=1` is `axis=1`, `ddof=1` is `correction=1`, and torch's
    `unbiased=True` is `correction=1` (`False`, 0)."""
    if keyword.name == "unbiased" and isinstance(keyword.value, (ast.BoolLiteral, ast.Name)):
        truth = keyword.value.value if isinstance(keyword.value, ast.BoolLiteral) else keyword.value.id.lower()
        return f"correction={1 if truth in (True, 'true') else 0}"
    return f"{KEYWORDS.get(keyword.name, keyword.name)}={shown(keyword.value)}"


def shown(node: ast.Expr) -> str:
    """An argument as DL writes it: a list of tensors (`[x, y]` in `torch.cat`) is a tuple; `True` is `true`."""
    if isinstance(node, ast.Name) and node.id in ("True", "False"):
        return node.id.lower()
    numbers = (ast.IntLiteral, ast.FloatLiteral)
    if isinstance(node, ast.TensorLiteral) and not all(isinstance(i, numbers) for i in node.items):
        return "(" + ", ".join(print_expr(i) for i in node.items) + ("," if len(node.items) == 1 else "") + ")"
    return print_expr(node)


def clamped(a: list[str]) -> str | None:
    """torch's `clamp(x, lo, hi)`, `clamp(x, min=lo)` or `clamp(x, max=hi)` (`input=` naming `x`): `clip`, or one
    of its sides; None for other keywords."""
    positional = [item for item in a if "=" not in item]
    named = dict(item.split("=", 1) for item in a if "=" in item)
    if set(named) - {"input", "min", "max"}:
        return None
    if "input" in named:
        positional.insert(0, named["input"])
    if not positional or len(positional) > 3:
        return None
    x, bounds = positional[0], positional[1:]
    lo = bounds[0] if bounds else named.get("min")
    hi = bounds[1] if len(bounds) > 1 else named.get("max")
    if lo is not None and hi is not None:
        return f"clip({x}, {lo}, {hi})"
    return f"maximum({x}, {lo})" if lo is not None else f"minimum({x}, {hi})" if hi is not None else None


def axis_keyword(rest: list[str]) -> str:
    return f", axis={rest[0]}" if rest else ""


# name -> DL's spelling of a call of it, from its arguments as DL writes them (None: no one spelling for these)
Spelling = Callable[[list[str]], str | None]
SPELLINGS: dict[str, Spelling] = {
    "unsqueeze": lambda a: f"expand_dims({a[0]}, {a[1]})" if len(a) == 2 else None,
    "view": lambda a: f"reshape({', '.join(a)})" if len(a) > 1 else None,
    "permute": lambda a: f"transpose({', '.join(a)})",
    "t": lambda a: f"transpose({a[0]})" if len(a) == 1 else None,
    "flatten": lambda a: f"reshape({a[0]}, -1)" if len(a) == 1 else None,
    "cat": lambda a: f"concat({a[0]}{axis_keyword(a[1:])})" if a else None,
    "concatenate": lambda a: f"concat({a[0]}{axis_keyword(a[1:])})" if a else None,
    "clamp": lambda a: clamped(a),
    "pow": lambda a: f"{a[0]} ** {a[1]}" if len(a) == 2 else None,
    "power": lambda a: f"{a[0]} ** {a[1]}" if len(a) == 2 else None,
    "mm": lambda a: f"{a[0]} @ {a[1]}" if len(a) == 2 else None,
    "dot": lambda a: f"{a[0]} @ {a[1]}" if len(a) == 2 else None,
    "bmm": lambda a: f"{a[0]} @ {a[1]}" if len(a) == 2 else None,
    "ones_like": lambda a: f"zeros_like({a[0]}) + 1.0" if len(a) == 1 else None,
    "full_like": lambda a: f"zeros_like({a[0]}) + {a[1]}" if len(a) == 2 else None,
    "randn_like": lambda a: f"randn(shape({a[0]}))" if len(a) == 1 else None,
    "rand_like": lambda a: f"rand(shape({a[0]}))" if len(a) == 1 else None,
    "masked_fill": lambda a: f"where({a[1]}, {a[2]}, {a[0]})" if len(a) == 3 else None,
    "size": lambda a: f"shape({a[0]})" if len(a) == 1 else None,
    "numel": lambda a: f"len(reshape({a[0]}, -1))" if len(a) == 1 else None,
    "linear": lambda a: f"nn.linear({', '.join(a)})",
    "cross_entropy": lambda a: f"nn.cross_entropy({', '.join(a)})",
    "mse_loss": lambda a: f"nn.mse({', '.join(a)})",
    "gelu": lambda a: f"nn.gelu({', '.join(a)})",
    "layer_norm": lambda a: f"nn.layer_norm({', '.join(a)})",
    "conv1d": lambda a: f"nn.conv1d({', '.join(a)})",
}


OPERATOR_SPELLINGS = frozenset({"pow", "power", "mm", "dot", "bmm"})  # spelled with an operator: operands wrapped


def range_spelling(call: ast.Call) -> tuple[str, ...]:
    """`range(3)` is `0..3` in DL, `range(a, b)` is `a..b`; a step has no DL spelling but a `while`."""
    bounds = [print_expr(arg) for arg in call.args]
    if call.keywords or not 1 <= len(bounds) <= 2:
        return ("help: DL counts with `for i in a..b` (no step: use a `while` loop), and `arange` makes a tensor",)
    start, stop = bounds if len(bounds) == 2 else ["0", bounds[0]]
    return (
        f"help: DL writes `range` as `{start}..{stop}`: `for i in {start}..{stop} {{ ... }}`",
        f"`arange({', '.join(bounds)})` makes the tensor of those integers",
    )


def spelled(name: str, call: ast.Call, receiver: ast.Expr | None) -> str | None:
    """DL's spelling of `call`, of `name` (a function or method of NumPy or PyTorch; a method's `receiver`
    first): a built-in of that name takes the arguments as they are (`dim=` is `axis=`); None where DL has no
    spelling of it here."""
    given = call.args
    if name in CREATION and len(given) == 1 and isinstance(given[0], (ast.TupleLiteral, ast.TensorLiteral)):
        given = given[0].items  # `np.zeros((3, 4))`: `zeros(3, 4)` (a tuple is DL too, `zeros((3, 4))`)
    nodes = (*((receiver,) if receiver is not None else ()), *given)
    args = [shown(a) for a in nodes]
    if name in OPERATOR_SPELLINGS:  # `pow(x + 1.0, 2.0)` is `(x + 1.0) ** 2.0`
        args = [text if precedence(a) == ATOM else f"({text})" for a, text in zip(nodes, args, strict=True)]
    if name == "transpose" and receiver is not None and len(args) == 3:  # PyTorch's x.transpose(a, b)
        return f"swapaxes({', '.join(args)})"
    if name == "gather" and len(args) == 3 and not call.keywords:  # PyTorch's gather(x, dim, index)
        return f"take_along_axis({args[0]}, {print_expr(given[-1])}, {args[1]})"  # the indices: a tensor
    if name in BUILT_INS:
        signature = PRIMITIVES[BY_NAME[name]].signature
        taken = len(signature.positional) + len(signature.optional)
        if signature.variadic is None and len(args) == taken + 1 and "axis" in signature.keyword_names:
            args[-1] = f"axis={args[-1]}"  # `x.sum(1)`: PyTorch's `dim` is DL's keyword `axis`
        args += [dl_keyword(k) for k in call.keywords]
        return f"{name}({', '.join(args)})"
    spelling = SPELLINGS.get(name)
    if name == "clamp":  # torch's `min=` and `max=` name the bounds
        return spelling([*args, *(f"{k.name}={shown(k.value)}" for k in call.keywords)])
    return spelling(args) if spelling is not None and not call.keywords else None


def call_help(call: ast.Call) -> tuple[str, ...]:
    """The help for a call of a function DL does not have by that name (`unsqueeze(x, 0)`, `range(3)`)."""
    func = call.func
    if not isinstance(func, ast.Name):
        return ()
    if func.id == "range":
        return range_spelling(call)
    if func.id == "zip" and len(call.args) >= 2 and not call.keywords:
        names = ", ".join(f"x{k + 1}" for k in range(len(call.args)))
        iterables = ", ".join(shown(a) for a in call.args)
        return (f"help: DL zips a tuple of iterables: `for ({names}) in ({iterables}) {{ ... }}`",)
    if func.id == "enumerate" and len(call.args) == 1 and not call.keywords:
        items = shown(call.args[0])
        return (f"help: DL counts with a range: `for i in 0..len({items}) {{ let item = {items}[i] ... }}`",)
    found = spelled(func.id, call, None)
    return (f"help: DL writes this `{found}`",) if found else ()


def module_help(module: str, field: ast.Field, call: ast.Call | None) -> tuple[str, ...]:
    """The help for an unknown name used as a module (`np.zeros(3)`, `torch.float32`, `nn.relu(x)` without
    `import nn`); `call`: the call of `field`, if it is called."""
    if module in STDLIB:
        return (f"help: `{module}` is in DL's standard library: `import {module}` at the top of the file",)
    if module not in FOREIGN_MODULES:
        return ()
    if field.name in DTYPE_NAMES:
        return (NAMES[field.name],)
    if call is not None:
        found = spelled(field.name, call, None)
        if found is not None:
            return (f"help: DL's built-ins need no module: `{found}`",)
    return ("help: DL's built-ins need no module: call them by name (`zeros(3)`, `exp(x)`)",)


# PyTorch's classes that DL's standard library spells as functions, by (module, name).
LAYER = "DL's layers are functions of weights a struct of yours holds"
MEMBERS = {
    ("nn", "Linear"): f"help: {LAYER}: `nn.linear(x, w, b)`, with `w = nn.kaiming(fan_in, fan_out, seed)`",
    ("nn", "LayerNorm"): f"help: {LAYER}: `nn.layer_norm(x, gamma, beta)`",
    ("nn", "Embedding"): f"help: {LAYER}: `nn.embedding(table, ids)`",
    ("nn", "CrossEntropyLoss"): "help: DL's losses are functions: `nn.cross_entropy(logits, labels)`",
    ("nn", "MSELoss"): "help: DL's losses are functions: `nn.mse(prediction, target)`",
    ("nn", "ReLU"): "help: DL's activations are functions: `relu(x)`",
    ("optim", "Adam"): "help: DL's optimizers are functions: `let state = optim.adam_init(params)`, then "
    "`(params, state) = optim.adam(params, grads, state)` each step",
    ("optim", "AdamW"): "help: DL's optimizers are functions: `let state = optim.adamw_init(params)`, then "
    "`(params, state) = optim.adamw(params, grads, state)` each step",
    ("optim", "SGD"): "help: DL's optimizers are functions: `params = optim.sgd(params, grads, lr)` each step",
}

# PyTorch's methods and attributes that DL has no function for, with what DL does instead (`{x}`: the value).
METHODS = {
    "backward": "help: DL has no `.backward()`: `grad(loss_fn)(params, ...)` returns the gradient (docs/autodiff.md)",
    "grad": "help: DL keeps no `.grad`: `grad(loss_fn)(params, ...)` returns the gradient (docs/autodiff.md)",
    "item": "help: `{x}` is a value already: use it as it is (`float({x})` converts)",
    "detach": "help: `stop_gradient({x})` is `{x}` with no gradient through it; DL differentiates only what `grad` "
    "is asked for",
    "numpy": "help: DL's tensors are values already: use `{x}` as it is",
    "append": "help: a tensor's length is fixed: join with `concat(({x}, [value]))`, or make it whole with `zeros(n)` "
    "and set `{x}[i] = value`",
    "format": 'help: DL formats with f-strings: `f"loss {{loss:.3f}}"`',
    "to": "help: `dlrun --backend cuda` runs the whole program on the GPU: no tensor is moved by hand; a dtype is "
    "converted with `int({x})` or `float({x}, dtype=f64)`",
    "long": "help: DL has no methods; convert with `int({x})`",
    "double": "help: DL has no methods; convert with `float({x}, dtype=f64)`",
    "ndim": "help: a tensor's rank is `len(shape({x}))`",
    "dim": "help: a tensor's rank is `len(shape({x}))`",
    "dtype": "help: a tensor's dtype is part of its type: `dlrun check --types` shows the types, and an editor's hover",
    "clone": "help: DL's values do not change in place: use `{x}` as it is",
    "copy": "help: DL's values do not change in place: use `{x}` as it is",
    "contiguous": "help: DL's tensors need no layout by hand: use `{x}` as it is",
    "cuda": "help: `dlrun --backend cuda` runs the whole program on the GPU: no tensor is moved by hand",
    "chunk": "help: DL has no methods and no `chunk`: slice the axis into its pieces, `{x}[..., 0:n]`, "
    "`{x}[..., n:2 * n]`, ... (n the size of a piece)",
    "split": "help: DL has no methods; `split_like({x}, (a, b), axis)` cuts `{x}` as long as the tensors `a` and "
    "`b`, or slice the axis: `{x}[..., 0:n]`, `{x}[..., n:2 * n]`",
}
IN_PLACE = {"add_": "+=", "sub_": "-=", "mul_": "*=", "div_": "/="}  # `x.add_(1.0)` is `x += 1.0`


def method_help(field: ast.Field, call: ast.Call | None) -> tuple[str, ...]:
    """The help for a method of a tensor (`x.sum()`, `x.view(3, 1)`, `x.T`): DL's functions take it first."""
    receiver = print_expr(field.target)
    if field.name == "T":
        return (f"help: transpose with `transpose({receiver})`",)
    if call is not None and call.func is field:
        found = spelled(field.name, call, field.target)
        if found is not None:
            return (f"help: DL has no methods; call `{found}`",)
    if field.name in BUILT_INS:
        return (f"help: DL has no methods; call `{field.name}({receiver})`",)
    if field.name in IN_PLACE and call is not None and call.func is field and len(call.args) == 1:
        return (f"help: DL has no methods; write `{receiver} {IN_PLACE[field.name]} {shown(call.args[0])}`",)
    if field.name in CONVERSIONS and call is not None and call.func is field and len(call.args) == 1:
        target = print_expr(call.args[0]).split(".")[-1]  # `x.to(torch.float64)`, `x.type(torch.long)`
        dtype = DTYPE_NAMES.get(target, target)
        if dtype in ("i64", "i32"):
            return (f"help: DL has no methods; convert with `int({receiver})`",)
        if dtype in ("f32", "f64"):
            return (f"help: DL has no methods; convert with `float({receiver}, dtype={dtype})`",)
    if field.name in ("size", "shape") and call is not None and call.func is field and len(call.args) == 1:
        return (f"help: DL has no methods; the size of an axis is `shape({receiver})[{shown(call.args[0])}]`",)
    if field.name in METHODS:
        return (METHODS[field.name].format(x=receiver),)
    return ()


CONVERSIONS = frozenset({"to", "type", "astype"})
