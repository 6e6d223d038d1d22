// The DL extension: starts `dlrun lsp` (the path is the `dl.server.path` setting) for .dl files and connects
// VS Code's language client to it over stdio. Highlighting before the server answers comes from the
// TextMate grammar in syntaxes/; the server's semantic tokens refine it.
"use strict";

const vscode = require("vscode");
const { LanguageClient, TransportKind } = require("vscode-languageclient/node");

let client;

function start() {
  const command = vscode.workspace.getConfiguration("dl").get("server.path", "dlrun");
  const server = { command, args: ["lsp"], transport: TransportKind.stdio };
  client = new LanguageClient(
    "dl",
    "DL language server",
    { run: server, debug: server },
    { documentSelector: [{ scheme: "file", language: "dl" }, { scheme: "untitled", language: "dl" }] }
  );
  return client.start();
}

async function activate(context) {
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      if (event.affectsConfiguration("dl.server.path")) {
        if (client) {
          await client.stop();
        }
        await start();
      }
    })
  );
  try {
    await start();
  } catch (error) {
    const command = vscode.workspace.getConfiguration("dl").get("server.path", "dlrun");
    vscode.window.showErrorMessage(
      `DL: could not start "${command} lsp" (${error}). ` +
        "Install DL (pip install -e .) or set dl.server.path to your dlrun."
    );
  }
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
