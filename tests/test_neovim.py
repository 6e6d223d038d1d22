"""A real editor: Neovim, headless, runs the `init.lua` snippet of docs/editors.md, which starts `dlrun lsp`
through Neovim's built-in LSP client; the test opens a file with a shape error and reads back, from Lua, the
diagnostics Neovim received and a hover. Skipped when `nvim` is not installed (.ci/run installs it)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs" / "editors.md"
BAD = "fn main() {\n    let x = ones(2, 3) @ ones(2, 3)\n}\n"

READ_BACK = """
local file, out = os.getenv("DL_FILE"), os.getenv("DL_OUT")
vim.cmd("edit " .. vim.fn.fnameescape(file))
local buf = vim.api.nvim_get_current_buf()
vim.wait(8000, function() return #vim.diagnostic.get(buf) > 0 end, 20)
local shown = {}
for _, d in ipairs(vim.diagnostic.get(buf)) do
  local lsp = d.user_data and d.user_data.lsp or {}
  table.insert(shown, { lnum = d.lnum, col = d.col, end_col = d.end_col, message = d.message,
                        code = d.code or lsp.code, source = d.source or lsp.source })
end
local where = { textDocument = { uri = vim.uri_from_bufnr(buf) }, position = { line = 1, character = 8 } }
local replies = vim.lsp.buf_request_sync(buf, "textDocument/hover", where, 5000) or {}
local hover = nil
for _, reply in pairs(replies) do
  if reply.result then hover = reply.result.contents.value end
end
local handle = io.open(out, "w")
handle:write(vim.fn.json_encode({ filetype = vim.bo[buf].filetype, diagnostics = shown, hover = hover }))
handle:close()
vim.cmd("qa!")
"""


def init_snippet() -> str:
    """The first Lua block of the Neovim section of docs/editors.md."""
    text = DOCS.read_text()
    found = re.search(r"```lua\n(.*?)```", text[text.index("## Neovim") :], re.DOTALL)
    assert found is not None, "docs/editors.md has no Lua snippet for Neovim"
    return found.group(1)


@pytest.mark.skipif(shutil.which("nvim") is None, reason="nvim is not installed (apt-get install neovim)")
def test_neovim_shows_the_shape_error_and_the_hover(tmp_path: Path) -> None:
    (tmp_path / "init.lua").write_text(init_snippet() + READ_BACK)
    file, out = tmp_path / "bad.dl", tmp_path / "out.json"
    file.write_text(BAD)
    # `dlrun` as the snippet runs it: the one next to this Python (the virtual environment's)
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": path, "DL_FILE": str(file), "DL_OUT": str(out), "HOME": str(tmp_path)}
    command = ["nvim", "--headless", "--clean", "-u", str(tmp_path / "init.lua")]
    subprocess.run(command, env=env, cwd=tmp_path, timeout=30, capture_output=True, check=False)
    assert out.exists(), "Neovim did not write what it received"
    received = json.loads(out.read_text())
    assert received["filetype"] == "dl"
    [diagnostic] = received["diagnostics"]
    assert (diagnostic["code"], diagnostic["source"]) == ("E0302", "dl")
    assert (diagnostic["lnum"], diagnostic["col"], diagnostic["end_col"]) == (1, 12, 35)
    assert diagnostic["message"].startswith("matmul inner dimensions differ: 3 vs 2")
    assert received["hover"] == "```dl\nx: _\n```"  # the failed matmul's result has an unknown type
