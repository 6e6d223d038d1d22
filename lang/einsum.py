"""`einsum` specs: parsing one, and the spec of each operand's adjoint.

A spec names each axis of each operand with a letter and says which letters the result keeps, in order:
`"bij,bjk->bik"` is a batch of matrix products. Letters the result does not keep are summed over. DL takes
numpy's explicit form only (`->` and the result's letters always written), with no `...` (every axis is
named) and no letter twice in one operand (no diagonals), so that every letter is one axis of the
iteration space and each operand's adjoint is itself an einsum (`adjoint_spec`).

The checker (lang/shapes.py `einsum_rule`), the interpreter, the LLVM backend and autodiff all read specs
through `parse`, so they agree on what a spec means.
"""

from __future__ import annotations

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
