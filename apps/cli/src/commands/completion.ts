import type { Command } from "commander";
import type { App } from "../app.ts";
import { usageError } from "../errors.ts";

interface CommandSpec {
  name: string;
  description: string;
  options: string[];
  takesBox: boolean;
  subcommands: CommandSpec[];
}

function specOf(cmd: Command): CommandSpec {
  const first = cmd.registeredArguments[0]?.name();
  return {
    name: cmd.name(),
    description: cmd.description(),
    options: [
      ...cmd.options
        .filter((o) => !o.hidden)
        .flatMap((o) => [o.long, o.short].filter((f): f is string => Boolean(f))),
      "--help",
    ],
    // Box names complete from the server for commands acting on an existing box.
    takesBox: first === "name" && cmd.name() !== "create" && cmd.parent?.name() === "doppio",
    subcommands: cmd.commands.map(specOf),
  };
}

/** Completion scripts generated from the command tree, so they never drift from it. */
export function registerCompletionCommand(program: Command, app: App): void {
  program
    .command("completion <shell>")
    .description("print a shell completion script (bash or zsh)")
    .addHelpText(
      "after",
      `
Examples:
  echo 'source <(doppio completion bash)' >> ~/.bashrc
  doppio completion zsh > "\${fpath[1]}/_doppio"`,
    )
    .action((shell: string) => {
      const commands = program.commands.map(specOf);
      const globals = program.options.flatMap((o) =>
        [o.long, o.short].filter((f): f is string => Boolean(f)),
      );
      if (shell === "bash") return void app.io.stdout.write(bashScript(commands, globals));
      if (shell === "zsh") return void app.io.stdout.write(zshScript(commands, globals));
      throw usageError(`unsupported shell "${shell}"`, "pick bash or zsh");
    });
}

const words = (xs: string[]) => xs.join(" ");

function bashScript(commands: CommandSpec[], globals: string[]): string {
  const cases = commands
    .map((c) => {
      if (c.subcommands.length > 0) {
        const subs = c.subcommands.map((s) => `        ${s.name}) opts="${words(s.options)}" ;;`).join("\n");
        return `    ${c.name})
      if [[ -z $sub ]]; then COMPREPLY=($(compgen -W "${words(c.subcommands.map((s) => s.name))}" -- "$cur")); return; fi
      local opts=""
      case $sub in
${subs}
      esac
      if [[ $sub == use || $sub == rm ]] && [[ $cur != -* ]]; then
        COMPREPLY=($(compgen -W "$(doppio context ls --json 2>/dev/null | sed -n 's/^ *"name": "\\(.*\\)",$/\\1/p')" -- "$cur")); return
      fi
      COMPREPLY=($(compgen -W "$opts" -- "$cur")) ;;`;
      }
      const boxes = c.takesBox
        ? `
      if [[ $cur != -* ]]; then COMPREPLY=($(compgen -W "$(doppio ls -q 2>/dev/null)" -- "$cur")); return; fi`
        : "";
      return `    ${c.name})${boxes}
      COMPREPLY=($(compgen -W "${words(c.options)}" -- "$cur")) ;;`;
    })
    .join("\n");
  return `# doppio bash completion; load with: source <(doppio completion bash)
_doppio() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" cmd="" sub="" i w
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="\${COMP_WORDS[i]}"
    case $w in
      --context) ((i++)) ;;
      -*) ;;
      *) if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $sub ]]; then sub=$w; fi ;;
    esac
  done
  case $cmd in
    "") COMPREPLY=($(compgen -W "${words(commands.map((c) => c.name))} ${words(globals)}" -- "$cur")) ;;
${cases}
  esac
}
complete -F _doppio doppio
`;
}

const shellQuote = (s: string) => s.replace(/'/g, "'\\''");
// In a _describe item only the name's colons need escaping; the description is free text.
const zshItem = (name: string, description: string) =>
  `'${shellQuote(name.replace(/:/g, "\\:"))}:${shellQuote(description)}'`;

function zshScript(commands: CommandSpec[], globals: string[]): string {
  const list = (cs: CommandSpec[]) => cs.map((c) => zshItem(c.name, c.description)).join(" ");
  const cases = commands
    .map((c) => {
      if (c.subcommands.length > 0) {
        const subs = c.subcommands
          .map((s) => `        ${s.name}) compadd -- ${words(s.options)} ;;`)
          .join("\n");
        return `    ${c.name})
      if [[ -z $sub ]]; then
        local -a subs; subs=(${list(c.subcommands)}); _describe 'subcommand' subs; return
      fi
      if [[ ($sub == use || $sub == rm) && $cur != -* ]]; then
        compadd -- \${(f)"$(doppio context ls --json 2>/dev/null | sed -n 's/^ *"name": "\\(.*\\)",$/\\1/p')"}; return
      fi
      case $sub in
${subs}
      esac ;;`;
      }
      const boxes = c.takesBox
        ? `
      if [[ $cur != -* ]]; then compadd -- \${(f)"$(doppio ls -q 2>/dev/null)"}; return; fi`
        : "";
      return `    ${c.name})${boxes}
      compadd -- ${words(c.options)} ;;`;
    })
    .join("\n");
  return `#compdef doppio
# doppio zsh completion; save as _doppio in a directory on $fpath, or: source <(doppio completion zsh)
_doppio() {
  local cmd="" sub="" cur="\${words[CURRENT]}" i
  for ((i = 2; i < CURRENT; i++)); do
    case \${words[i]} in
      --context) ((i++)) ;;
      -*) ;;
      *) if [[ -z $cmd ]]; then cmd=\${words[i]}; elif [[ -z $sub ]]; then sub=\${words[i]}; fi ;;
    esac
  done
  case $cmd in
    "")
      if [[ $cur == -* ]]; then compadd -- ${words(globals)}; return; fi
      local -a cmds; cmds=(${list(commands)}); _describe 'command' cmds ;;
${cases}
  esac
}
if [[ $funcstack[1] == _doppio ]]; then _doppio "$@"; else compdef _doppio doppio; fi
`;
}
