"""Packing a specialised function's buffers into one workspace: `packed(blocks, buffers)`.

Each buffer lives from the instruction that first writes it to the last that reads it; buffers whose
lives do not overlap share bytes of the workspace the host allocates once per specialisation.
"""

from __future__ import annotations

from dl.codegen import ir
from dl.codegen.ir import count_reads, rebuilt


def packed(blocks: tuple[ir.Block, ...], buffers: list[ir.Buffer]) -> tuple:
    """The workspace laid out again so that buffers never in use at once share memory: (blocks, buffers,
    workspace size). A buffer is in use from the first instruction naming it to the last, in the
    blocks' order; one named inside a loop (a block a later block jumps back to, through the one that
    jumps) is in use for the whole loop, every iteration. Buffers of unused (dropped) values take none."""
    order = {block.label: position for position, block in enumerate(blocks)}
    spans: dict[str, list[int]] = {}
    fresh: set[str] = set()  # buffers whose first instruction writes them whole without reading them
    position = 0
    block_span: dict[str, tuple[int, int]] = {}
    for block in blocks:
        first = position
        for instruction in block.instructions:
            for name in named_buffers(instruction):
                if name not in spans and defines(instruction, name):
                    fresh.add(name)
                span = spans.setdefault(name, [position, position])
                span[1] = position
            position += 1
        block_span[block.label] = (first, position)
        position += 1
    loops = []
    for block in blocks:
        for target in targets(block.terminator):
            if order[target] <= order[block.label]:
                loops.append((block_span[target][0], block_span[block.label][1]))
    changed = True
    while changed:
        changed = False
        for name, span in spans.items():
            for start, end in loops:
                inside = start <= span[0] and span[1] <= end
                if inside and name in fresh:
                    continue  # made anew by each iteration before any use: nothing flows around the loop
                if span[0] <= end and span[1] >= start and (span[0] > start or span[1] < end):
                    span[0], span[1] = min(span[0], start), max(span[1], end)
                    changed = True
    workspace = [b for b in buffers if b.slot == 0 and b.name in spans]
    workspace.sort(key=lambda b: (spans[b.name][0], -b.size))
    active: list[tuple[int, int, int]] = []  # (end, offset, bytes)
    offsets: dict[str, int] = {}
    size = 0
    for buffer in workspace:
        start, end = spans[buffer.name]
        active = [a for a in active if a[0] >= start]
        need = max(buffer.size, 1) * ir.ITEM_BYTES[buffer.dtype]
        offset = 0
        for _, taken, length in sorted(active, key=lambda a: a[1]):
            if offset + need <= taken:
                break
            offset = max(offset, (taken + length + 63) // 64 * 64)
        offsets[buffer.name] = offset
        active.append((end, offset, need))
        size = max(size, offset + need)
    moved = {}
    for buffer in buffers:
        if buffer.slot != 0:
            moved[buffer.name] = buffer
        elif buffer.name in offsets:
            moved[buffer.name] = ir.Buffer(buffer.name, buffer.dtype, buffer.shape, 0, offsets[buffer.name])
    new_blocks = tuple(
        ir.Block(block.label, tuple(rebuilt(i, moved) for i in block.instructions), block.terminator)
        for block in blocks
    )
    return new_blocks, tuple(moved.values()), size


def defines(instruction: object, name: str) -> bool:
    """Whether `instruction` writes all of buffer `name` and reads none of it."""
    reads_it: dict[str, int] = {}
    if isinstance(instruction, (ir.Fill, ir.Reduce, ir.Scan)):  # (a scan reads only what it wrote)
        count_reads(instruction.tree, reads_it)
        whole = not isinstance(instruction, ir.Fill) or instruction.view is None
        return instruction.target.name == name and whole and name not in reads_it
    if isinstance(instruction, ir.Draw):
        return instruction.target.name == name
    if isinstance(instruction, ir.Sort):  # (each row writes its scratch before reading it)
        count_reads(instruction.tree, reads_it)
        written = (instruction.target.name, instruction.keys.name, instruction.positions.name)
        return name in written and name not in reads_it
    if isinstance(instruction, ir.Sample):
        return instruction.target.name == name and instruction.logits.buffer.name != name
    if isinstance(instruction, ir.MatMul):
        operands = {instruction.a.buffer.name, instruction.b.buffer.name}
        return instruction.out.name == name and not instruction.accumulate and name not in operands
    if isinstance(instruction, (ir.TapePop, ir.CallSpecialised)):  # a call writes its results' buffers whole
        leaves = instruction.leaves if isinstance(instruction, ir.TapePop) else instruction.results
        return any(isinstance(leaf, ir.Buffer) and leaf.name == name for _, leaf in leaves)
    return False


def targets(terminator: object) -> tuple[str, ...]:
    if isinstance(terminator, ir.Jump):
        return (terminator.target,)
    if isinstance(terminator, ir.Branch):
        return (terminator.then, terminator.otherwise)
    return ()


def named_buffers(node: object) -> set[str]:
    """Every buffer an instruction reads or writes."""
    found: set[str] = set()

    def visit(item: object) -> None:
        if isinstance(item, ir.Buffer):
            found.add(item.name)
        elif isinstance(item, tuple):
            for part in item:
                visit(part)
        elif hasattr(item, "__dataclass_fields__"):
            for name in item.__dataclass_fields__:
                visit(getattr(item, name))

    visit(node)
    return found
