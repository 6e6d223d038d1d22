"""Optimisations of a specialised function's IR (codegen/ir.py), before its workspace is packed.

`without_dead_stores` drops writes nothing reads; `computed_once` writes a tree used several times once;
`forwarded` computes a single-use buffer in its consumer instead; `accumulate_in_place` lets a product or a
scatter add into the buffer its result is added to (gemm's beta = 1). Each takes and gives blocks.
"""

from __future__ import annotations

from dl.codegen import ir
from dl.codegen.ir import contiguous, count_reads, rebuilt
from dl.codegen.values import ZERO, adds_nothing

WRITES = (ir.Fill, ir.Reduce, ir.Scan, ir.Sort, ir.MatMul, ir.ScatterAdd, ir.Draw, ir.Sample)


def reads_at(instructions: list, position: int, known: dict[int, dict[str, int]]) -> dict[str, int]:
    """What the instruction at `position` reads, counted once and kept in `known`."""
    if position not in known:
        known[position] = {}
        count_reads(instructions[position], known[position])
    return known[position]


def forwarded(blocks: list[ir.Block]) -> list[ir.Block]:
    """A buffer written once by a `Fill` and read once, whole and as laid out, by a later loop of the same
    block over the same shape is not written at all: its tree is computed inside that loop (the lowering
    writes a value bound to a name used twice, or a field of a struct, before it knows how it is used).
    Nothing between may write what the tree reads."""
    writes = write_counts(blocks)
    counts: dict[str, int] = {}
    for block in blocks:
        for instruction in block.instructions:
            count_reads(instruction, counts)
    result = []
    for block in blocks:
        instructions = list(block.instructions)
        reads: dict[int, dict[str, int]] = {}  # by position, until the instruction there is replaced
        for position, producer in enumerate(instructions):
            if not (isinstance(producer, ir.Fill) and producer.view is None and producer.target.slot == 0):
                continue
            if ir.can_fail(producer.tree):  # its index check stays where the interpreter would fail
                continue
            target = producer.target
            if writes.get(target.name) != 1 or counts.get(target.name) != 1:
                continue
            read_by: dict[str, int] = {}
            count_reads(producer.tree, read_by)
            for later in range(position + 1, len(instructions)):
                consumer = instructions[later]
                if consumer is None:
                    continue
                if target.name in reads_at(instructions, later, reads):
                    consumer_writes = written_buffer(consumer)
                    if consumer_writes is not None and consumer_writes.name in read_by:
                        break  # it overwrites what the tree reads as it goes
                    replaced = substituted(consumer, target, producer.tree)
                    if replaced is not None:
                        instructions[later] = replaced
                        instructions[position] = None
                        reads.pop(later, None)
                    break
                written = written_buffer(consumer)
                if overwritten(consumer) or (written is not None and written.name in read_by):
                    break
        result.append(ir.Block(block.label, tuple(i for i in instructions if i is not None), block.terminator))
    return result


def computed_once(blocks: list[ir.Block]) -> list[ir.Block]:
    """A loop computing the same tree as an earlier one of its block (nothing between writing what they
    read, each buffer written once) is dropped, and its buffer's readers read the earlier one (inlined
    functions recompute what their callers computed: derivative code's `sigmoid_back(x, d)` recomputes
    `sigmoid(x)`)."""
    writes = write_counts(blocks)
    renamed: dict[str, ir.Buffer] = {}
    result = []
    for block in blocks:
        seen: dict[object, tuple[ir.Buffer, set[str]]] = {}
        kept = []
        for instruction in block.instructions:
            instruction = rebuilt(instruction, renamed) if renamed else instruction
            written = written_buffer(instruction)
            popped = overwritten(instruction)
            if written is not None or popped:  # what it writes is no longer what an earlier tree computed
                names = ({written.name} if written is not None else set()) | popped
                for tree in [t for t, (target, reads_) in seen.items() if (reads_ | {target.name}) & names]:
                    del seen[tree]  # (not a new dict: that would hash every tree kept again)
            simple = (
                isinstance(instruction, ir.Fill)
                and instruction.view is None
                and instruction.target.slot == 0
                and writes.get(instruction.target.name) == 1
                and not ir.can_fail(instruction.tree)
            )
            if simple:
                earlier = seen.get(instruction.tree)
                if earlier is not None and earlier[0].shape == instruction.target.shape:
                    renamed[instruction.target.name] = earlier[0]
                    continue
                read_by: dict[str, int] = {}
                count_reads(instruction.tree, read_by)
                seen[instruction.tree] = (instruction.target, set(read_by))
            kept.append(instruction)
        result.append(ir.Block(block.label, tuple(kept), block.terminator))
    if not renamed:
        return result
    return [ir.Block(b.label, tuple(rebuilt(i, renamed) for i in b.instructions), b.terminator) for b in result]


def substituted(consumer: object, target: ir.Buffer, tree: object) -> object | None:
    """`consumer` with its one read of `target` (whole, as laid out, over the consumer's own loop shape)
    replaced by `tree`; None if the read is not like that."""
    whole = ir.Read(target, ZERO, contiguous(target.shape))
    if isinstance(consumer, ir.Fill):
        shape = consumer.shape if consumer.view is not None else consumer.target.shape
        if shape != target.shape or not contains(consumer.tree, whole):
            return None
        return ir.Fill(consumer.target, replace(consumer.tree, whole, tree), consumer.view, consumer.shape)
    if isinstance(consumer, ir.Reduce):
        if consumer.shape != target.shape or not contains(consumer.tree, whole) or ir.costly(tree):
            return None
        return ir.Reduce(
            consumer.target, consumer.op, replace(consumer.tree, whole, tree), consumer.shape, consumer.axes
        )
    return None


def contains(tree: object, node: object) -> bool:
    if tree == node:
        return True
    if isinstance(tree, ir.Apply):
        return any(contains(a, node) for a in tree.args)
    if isinstance(tree, ir.Take):
        return contains(tree.index, node)
    return False


def replace(tree: object, node: object, by: object) -> object:
    if tree == node:
        return by
    if isinstance(tree, ir.Apply):
        args = tuple(replace(a, node, by) for a in tree.args)
        if tree.op == "add" and len(args) == 2:  # zeros forwarded into a sum
            for zero, other in ((0, 1), (1, 0)):
                if adds_nothing(args[zero], tree.dtype) and ir.tree_dtype(args[other]) == tree.dtype:
                    return args[other]
        return ir.Apply(tree.op, tree.dtype, args)
    if isinstance(tree, ir.Take):
        return ir.Take(
            tree.buffer, tree.offset, tree.strides, replace(tree.index, node, by), tree.stride, tree.size, tree.site
        )
    return tree


def with_every_target(blocks: list[ir.Block]) -> list[ir.Block]:
    """`blocks`, plus a block that returns for each label jumped to but not made (a probe's abandoned
    paths: only what the other paths return is learnt from it)."""
    made = {block.label for block in blocks}
    targets = []
    for block in blocks:
        match block.terminator:
            case ir.Jump(target=target):
                targets.append(target)
            case ir.Branch(then=then, otherwise=otherwise):
                targets += [then, otherwise]
    missing = list(dict.fromkeys(t for t in targets if t not in made))
    return [*blocks, *(ir.Block(label, (), ir.Return(None)) for label in missing)]


def without_dead_stores(blocks: list[ir.Block]) -> list[ir.Block]:
    """Drop every loop or product writing a workspace buffer nothing reads (inlining computes whole values
    of which a caller may use only the shape: derivative code's `zeros_like(lstm_cell(...)[0])`), until
    none is left."""
    while True:
        counts: dict[str, int] = {}
        for block in blocks:
            for instruction in block.instructions:
                count_reads(instruction, counts)
        dead = False
        kept_blocks = []
        for block in blocks:
            kept = []
            for instruction in block.instructions:
                written = written_buffer(instruction)
                unread = written is not None and written.slot == 0 and counts.get(written.name, 0) == 0
                if unread and not checks(instruction):
                    dead = True
                    continue
                kept.append(instruction)
            kept_blocks.append(ir.Block(block.label, tuple(kept), block.terminator))
        blocks = kept_blocks
        if not dead:
            return blocks


def checks(instruction: object) -> bool:
    """Whether an instruction can fail (a gather's or a scatter's index check, a categorical sample's row
    check), or draws from the run's random generator (the next draw depends on it): it is never dropped."""
    if isinstance(instruction, ir.ScatterAdd):
        return instruction.site is not None
    if isinstance(instruction, ir.Sample):
        return True
    if isinstance(instruction, ir.Draw):
        return instruction.seed is None
    return isinstance(instruction, (ir.Fill, ir.Reduce)) and ir.can_fail(instruction.tree)


def write_counts(blocks: list[ir.Block]) -> dict[str, int]:
    """How many instructions write each buffer (a tape's `pop` and a call count as two: their buffers
    are not written once)."""
    writes: dict[str, int] = {}
    for block in blocks:
        for instruction in block.instructions:
            written = written_buffer(instruction)
            if written is not None:
                writes[written.name] = writes.get(written.name, 0) + 1
            for name in overwritten(instruction):
                writes[name] = writes.get(name, 0) + 2
    return writes


def overwritten(instruction: object) -> set[str]:
    """The buffers a tape's `pop` or a real call writes (not loops: the passes leave them alone)."""
    if isinstance(instruction, ir.TapePop):
        return {leaf.name for _, leaf in instruction.leaves if isinstance(leaf, ir.Buffer)}
    if isinstance(instruction, ir.CallSpecialised):
        return {leaf.name for _, leaf in instruction.results if isinstance(leaf, ir.Buffer)}
    return set()


def written_buffer(instruction: object) -> ir.Buffer | None:
    if isinstance(instruction, ir.MatMul):
        return instruction.out
    if isinstance(instruction, WRITES):
        return instruction.target
    return None


def accumulate_in_place(blocks: list[ir.Block]) -> tuple[ir.Block, ...]:
    """`h = h + p` where `p` is a product or a scatter into zeros made for it alone (derivative code adds
    each step's weight gradient `transpose(x) @ d`, each embedding gradient `scatter_add(zeros_like(t), ...)`,
    to the running total): the product accumulates into `h` (gemm with beta = 1), the scatter scatters into
    `h`, and neither `p` nor the addition's loop exists."""
    counts: dict[str, int] = {}
    for block in blocks:
        for instruction in block.instructions:
            count_reads(instruction, counts)
    result = []
    for block in blocks:
        instructions = list(block.instructions)
        for position, instruction in enumerate(instructions):
            total = accumulation(instruction)
            if total is None:
                continue
            home, part = total
            if counts.get(part.name, 0) != 1:
                continue
            producer = producing(instructions, position, part, home)
            if producer is None:
                continue
            start, made = producer
            if isinstance(made, ir.MatMul):
                instructions[start] = ir.MatMul(home, made.a, made.b, made.m, made.n, made.k, True)
            else:
                instructions[start - 1] = None  # the zeros it scattered into
                instructions[start] = ir.ScatterAdd(home, *astuple_tail(made))
            instructions[position] = None
        result.append(ir.Block(block.label, tuple(i for i in instructions if i is not None), block.terminator))
    return tuple(result)


def astuple_tail(scatter: ir.ScatterAdd) -> tuple:
    return (scatter.strides, scatter.index, scatter.stride, scatter.size, scatter.updates, scatter.shape, scatter.site)


def accumulation(instruction: object) -> tuple[ir.Buffer, ir.Buffer] | None:
    """(h, p) for `Fill(h, h + p)` with both read whole, as laid out."""
    if not isinstance(instruction, ir.Fill) or instruction.view is not None:
        return None
    tree, home = instruction.tree, instruction.target
    if not (isinstance(tree, ir.Apply) and tree.op == "add" and len(tree.args) == 2):
        return None
    whole = contiguous(home.shape)
    reads_ = [a for a in tree.args if isinstance(a, ir.Read) and a.offset == ZERO and a.strides == whole]
    if len(reads_) != 2:
        return None
    first, second = (r.buffer for r in reads_)
    if first == home and second != home and second.shape == home.shape and second.dtype == home.dtype:
        return home, second
    if second == home and first != home and first.shape == home.shape and first.dtype == home.dtype:
        return home, first
    return None


def producing(instructions: list, position: int, part: ir.Buffer, home: ir.Buffer):
    """Where `part` was made, by a product or by a scatter into zeros, with nothing between that and
    `position` touching `home` or the product's operands; else None."""
    for start in range(position - 1, -1, -1):
        instruction = instructions[start]
        if instruction is None:  # an addition already done by its product or scatter (which is still here)
            continue
        if isinstance(instruction, ir.MatMul) and instruction.out == part and not instruction.accumulate:
            between = instructions[start + 1 : position]
            operands = {instruction.a.buffer.name, instruction.b.buffer.name}
            if home.name not in operands and not any(touches(i, {home.name}) for i in between):
                return start, instruction
            return None
        if isinstance(instruction, ir.ScatterAdd) and instruction.target == part and start > 0:
            zeros = instructions[start - 1]
            cleared = isinstance(zeros, ir.Fill) and zeros.target == part and zeros.view is None
            if cleared and isinstance(zeros.tree, ir.Splat) and zeros.tree.value.value == 0:
                between = instructions[start + 1 : position]
                if not any(touches(i, {home.name}) for i in between) and not touches(instruction, {home.name}):
                    return start, instruction
            return None
        if touches(instruction, {part.name, home.name}):
            return None
    return None


def touches(instruction: object, names: set[str]) -> bool:
    """Whether an instruction reads or writes a buffer of `names` (tapes and control flow count)."""
    found: dict[str, int] = {}
    count_reads(instruction, found)
    if names & set(found):
        return True
    target = getattr(instruction, "target", None) or getattr(instruction, "out", None)
    if isinstance(target, ir.Buffer) and target.name in names:
        return True
    return bool(overwritten(instruction) & names)
