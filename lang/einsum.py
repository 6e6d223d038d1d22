"""`einsum` specs: parsing one, the spec of each operand's adjoint, and the order in which compiled code
contracts three operands or more (`contraction_path`).

A spec names each axis of each operand with a letter and says which letters the result keeps, in order:
`"bij,bjk->bik"` is a batch of matrix products. Letters the result does not keep are summed over. DL takes
numpy's explicit form only (`->` and the result's letters always written), with no `...` (every axis is
named) and no letter twice in one operand (no diagonals), so that every letter is one axis of the
iteration space and each operand's adjoint is itself an einsum (`adjoint_spec`).

The checker (lang/shapes.py `einsum_rule`), the interpreter, the LLVM backend and autodiff all read specs
through `parse`, so they agree on what a spec means.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from functools import cache

from dl.lang.record import record


class SpecError(Exception):
    """Why a spec is not one DL takes (a message in the user's terms)."""


@record(frozen=True, slots=True)
class Spec:
    inputs: tuple[str, ...]  # each operand's letters, one per axis
    output: str  # the result's letters, in order

    @property
    def summed(self) -> str:
        """The letters summed over (in no operand's result), in order of first use."""
        seen = dict.fromkeys(letter for letters in self.inputs for letter in letters)
        return "".join(letter for letter in seen if letter not in self.output)

    def __str__(self) -> str:
        return f"{','.join(self.inputs)}->{self.output}"


@cache
def parse(text: str) -> Spec:
    """The spec `text` (spaces ignored), or `SpecError` saying what is wrong with it."""
    compact = text.replace(" ", "")
    if "." in compact:
        raise SpecError("`...` is not supported in an einsum spec: name each axis with a letter")
    if compact.count("->") != 1:
        raise SpecError(f'an einsum spec writes its result after `->`, as in "ij,jk->ik"; found "{text}"')
    left, output = compact.split("->")
    inputs = tuple(left.split(","))
    for position, letters in enumerate((*inputs, output)):
        what = "the result" if position == len(inputs) else f"operand {position + 1}"
        strange = [c for c in letters if not c.isascii() or not c.isalpha()]
        if strange:
            raise SpecError(f'einsum spec "{text}": `{strange[0]}` in {what} is not a letter')
        repeated = sorted({c for c in letters if letters.count(c) > 1})
        if repeated:
            raise SpecError(
                f'einsum spec "{text}": `{repeated[0]}` names two axes of {what}'
                + (" (diagonals are not supported)" if position < len(inputs) else "")
            )
    unknown = [c for c in output if not any(c in letters for letters in inputs)]
    if unknown:
        raise SpecError(f'einsum spec "{text}": the result\'s `{unknown[0]}` names no axis of an operand')
    return Spec(inputs, output)


def adjoint_spec(spec: Spec, operand: int) -> tuple[Spec, bool]:
    """The einsum computing the adjoint of operand `operand` from the result's adjoint (first) and the
    other operands (in order): their product summed over everything but the operand's own letters. A letter
    of the operand that nothing else has (summed over in it alone) is not in any input of that product:
    the second value says so, and the product then takes a last input of ones of the operand's shape, so
    that the adjoint is spread over that axis."""
    own = spec.inputs[operand]
    others = tuple(letters for position, letters in enumerate(spec.inputs) if position != operand)
    covered = set(spec.output).union(*others)
    needs_ones = any(letter not in covered for letter in own)
    inputs = (spec.output, *others, *((own,) if needs_ones else ()))
    return Spec(inputs, own), needs_ones


Path = tuple[tuple[tuple[int, ...], Spec], ...]


def contraction_path(spec: Spec, sizes: Mapping[str, int]) -> Path:
    """The steps computing `spec` (each letter's size in `sizes`), as numpy's `einsum_path` writes them: each
    step takes the operands at its positions in the list of those left (the spec's at first), contracts them
    by its spec and appends the result to the list. Three operands or more go two at a time, as numpy's
    `einsum(optimize=True)` (its greedy path): each step contracts the pair `best_pair` picks into their
    letters that another operand or the result still needs, summing the rest; the last step's spec keeps
    the result's letters. Fewer operands, or pairs making no fewer iterations in all than one loop nest over
    every letter, give that one step."""
    whole = ((tuple(range(len(spec.inputs))), spec),)
    if len(spec.inputs) < 3:
        return whole
    left, steps, iterations = list(spec.inputs), [], 0
    while len(left) > 1:
        (first, second), kept = best_pair(left, spec.output, sizes)
        steps.append(((first, second), Spec((left[first], left[second]), kept)))
        iterations += nest_size(left[first] + left[second], sizes)
        left = [letters for position, letters in enumerate(left) if position not in (first, second)]
        left.append(kept)
    return tuple(steps) if iterations < nest_size("".join(spec.inputs), sizes) else whole


def best_pair(inputs: list[str], output: str, sizes: Mapping[str, int]) -> tuple[tuple[int, int], str]:
    """The positions of the pair of `inputs` to contract first, and the letters of its result, as numpy's
    greedy path chooses: among the pairs sharing a letter (all pairs if none do: outer products come last),
    the one whose result is smallest beside its operands (their elements less its elements, the most), then
    the one with the smallest loop nest (the product of the sizes of its letters), then the leftmost."""
    pairs = list(itertools.combinations(range(len(inputs)), 2))
    sharing = [(a, b) for a, b in pairs if set(inputs[a]) & set(inputs[b])]
    choices = []
    for first, second in sharing or pairs:
        kept = kept_letters(inputs, (first, second), output)
        removed = nest_size(inputs[first], sizes) + nest_size(inputs[second], sizes) - nest_size(kept, sizes)
        choices.append(((-removed, nest_size(inputs[first] + inputs[second], sizes)), (first, second), kept))
    _, pair, kept = min(choices, key=lambda choice: choice[0])
    return pair, kept


def kept_letters(inputs: list[str], pair: tuple[int, int], output: str) -> str:
    """The letters of the pair at `pair` that the result or another input needs: the result's first, in its
    order, then the others in order of first use."""
    joined = inputs[pair[0]] + inputs[pair[1]]
    needed = set(output).union(*(letters for position, letters in enumerate(inputs) if position not in pair))
    return "".join(letter for letter in dict.fromkeys(output + joined) if letter in joined and letter in needed)


def nest_size(letters: str, sizes: Mapping[str, int]) -> int:
    """The iterations of one loop nest over the distinct `letters` (the elements of an operand of them)."""
    return math.prod(sizes[letter] for letter in set(letters))
