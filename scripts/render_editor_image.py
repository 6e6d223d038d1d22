"""Render docs/images/editor.png: lines of examples/regression.dl coloured by the language server's semantic
tokens, with the hover the server gives for a name and a shape-error squiggle, drawn with Pillow. It is a
rendering of what `dlrun lsp` answers (the same functions its handlers call), not a screenshot of an editor.

    .venv/bin/python scripts/render_editor_image.py
"""

from __future__ import annotations

from pathlib import Path

from dl import lang, lsp
from PIL import Image, ImageDraw, ImageFont

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "examples" / "regression.dl"
OUT = ROOT / "docs" / "images" / "editor.png"
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"
FIRST, LAST = 13, 31  # the 1-based lines shown
HOVER_AT = (22, 20)  # `xs` in `for (x, y) in (xs, ys)`
COLOURS = {  # a dark theme, by semantic token type (built-ins by their modifier)
    "keyword": "#c586c0",
    "function": "#dcdcaa",
    "builtin": "#4ec9b0",
    "parameter": "#9cdcfe",
    "variable": "#9cdcfe",
    "property": "#9cdcfe",
    "struct": "#4ec9b0",
    "type": "#569cd6",
    "typeParameter": "#b8d7a3",
    "namespace": "#4ec9b0",
    "number": "#b5cea8",
    "string": "#ce9178",
    "comment": "#6a9955",
    "operator": "#d4d4d4",
}


def main() -> None:
    # the example with a shape error typed into its loop, as the server sees it mid-edit
    source = SOURCE.read_text().replace("sum(x * line.w)", "sum(x @ ones(2, 1))")
    path = str(SOURCE)
    typed = lang.check(source, path)
    tokens = lsp.semantic_tokens(source, typed, path)
    hover, _ = lsp.hover_text(typed, path, source, *HOVER_AT)
    [error] = [d for d in typed.diagnostics if d.is_error]

    font = ImageFont.truetype(FONT, 15)
    width, height = font.getbbox("M")[2], 21
    lines = source.split("\n")[FIRST - 1 : LAST]
    image = Image.new("RGB", (86 * width + 60, (len(lines) + 4) * height + 20), "#1e1e1e")
    draw = ImageDraw.Draw(image)

    def x(column: int) -> int:
        return 50 + (column - 1) * width

    def y(line: int) -> int:
        return 10 + (line - FIRST) * height

    for number, text in enumerate(lines, start=FIRST):
        draw.text((8, y(number)), f"{number:>3}", font=font, fill="#858585")
        draw.text((x(1), y(number)), text, font=font, fill="#d4d4d4")
    for line, column, length, kind, modifiers in tokens:
        if FIRST <= line <= LAST:
            colour = COLOURS["builtin" if "defaultLibrary" in modifiers else kind]
            text = source.split("\n")[line - 1][column - 1 : column - 1 + length]
            draw.rectangle((x(column), y(line), x(column + length), y(line) + height - 2), fill="#1e1e1e")
            draw.text((x(column), y(line)), text, font=font, fill=colour)
    # the error's squiggle and its message below the code
    line, start, end = error.span.line, error.span.column, error.span.end_column
    for left in range(x(start), x(end), 4):
        draw.line((left, y(line) + 17, left + 2, y(line) + 19, left + 4, y(line) + 17), fill="#f14c4c")
    bottom = y(LAST + 1) + 8
    draw.text((x(1), bottom), f"{error.code} {error.message}", font=font, fill="#f14c4c")
    # the hover box above the hovered name
    line, column = HOVER_AT
    box = (x(column), y(line) - height - 4, x(column) + (len(hover) + 2) * width, y(line) - 1)
    draw.rectangle(box, fill="#252526", outline="#454545")
    draw.text((box[0] + width, box[1] + 3), hover, font=font, fill="#9cdcfe")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    image.save(OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
