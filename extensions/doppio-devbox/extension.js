// The box's own VS Code extension, run by code-server inside the guest. Plain CommonJS so
// it ships without a build step. The box's identity changes after every restore from the
// golden snapshot, so the site URL is read from the metadata the guest applied
// (/run/doppio/meta.json) each time, never from the extension host's start-up env.
const fs = require("node:fs");
const vscode = require("vscode");

const META = "/run/doppio/meta.json";
const LOG_DIR = "/var/log/doppio";

function readMeta() {
  try {
    return JSON.parse(fs.readFileSync(META, "utf8").replace(/\0/g, ""));
  } catch {
    return null;
  }
}

async function viewSite() {
  const meta = readMeta();
  if (!meta?.site_url) {
    await vscode.window.showWarningMessage("Doppio: this box has no site URL yet.");
    return;
  }
  await vscode.env.openExternal(vscode.Uri.parse(meta.site_url));
}

function logFiles() {
  try {
    return fs
      .readdirSync(LOG_DIR)
      .filter((f) => f.endsWith(".log"))
      .map((f) => `${LOG_DIR}/${f}`);
  } catch {
    return [];
  }
}

function openLogs() {
  const files = logFiles();
  if (files.length === 0) {
    void vscode.window.showWarningMessage(`Doppio: no service logs in ${LOG_DIR}.`);
    return;
  }
  const term = vscode.window.createTerminal({ name: "Doppio logs" });
  term.show();
  // Paths come from our own directory listing; quote them for the shell all the same.
  term.sendText(`tail -n 200 -F ${files.map((f) => `'${f.replace(/'/g, "'\\''")}'`).join(" ")}`);
}

function activate(context) {
  context.subscriptions.push(
    vscode.commands.registerCommand("doppio.viewSite", viewSite),
    vscode.commands.registerCommand("doppio.openLogs", openLogs),
  );
}

function deactivate() {}

module.exports = { activate, deactivate };
