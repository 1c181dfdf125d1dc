import "@xterm/xterm/css/xterm.css";
import { Terminal as XTerm } from "@xterm/xterm";
import { useEffect, useRef } from "react";

const FONT_SIZE = 13;
const ROWS = 16;
const FONT_FAMILY = "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace";
/** Room for the container's padding and xterm's scrollbar. */
const SCROLLBAR_PX = 32;

function measureCellWidth(parent: HTMLElement): number {
  const probe = document.createElement("span");
  probe.style.cssText = `position:absolute;visibility:hidden;white-space:pre;font:${FONT_SIZE}px ${FONT_FAMILY}`;
  probe.textContent = "W".repeat(100);
  parent.appendChild(probe);
  const width = probe.getBoundingClientRect().width / 100;
  probe.remove();
  return width > 0 ? width : FONT_SIZE * 0.6;
}

/**
 * A read-only xterm.js view of `lines`. Lines change in place (a running step becomes a
 * finished one), so the terminal is redrawn from the full list; it holds a few hundred lines.
 */
export function Terminal({ lines, label }: { lines: readonly string[]; label: string }) {
  const host = useRef<HTMLDivElement>(null);
  const term = useRef<XTerm | null>(null);

  useEffect(() => {
    const el = host.current;
    if (!el) return;
    const t = new XTerm({
      convertEol: true,
      disableStdin: true,
      cursorBlink: false,
      cursorInactiveStyle: "none",
      fontSize: FONT_SIZE,
      fontFamily: FONT_FAMILY,
      rows: ROWS,
      scrollback: 2000,
      theme: { background: "#1d2330", foreground: "#e6e9ef" },
    });
    t.open(el);
    term.current = t;
    // No fit addon here: size columns from the container width and a measured cell width.
    const cell = measureCellWidth(el);
    const fitColumns = () => {
      const cols = Math.max(20, Math.floor((el.clientWidth - SCROLLBAR_PX) / cell));
      if (cols !== t.cols) t.resize(cols, ROWS);
    };
    fitColumns();
    const ro = new ResizeObserver(fitColumns);
    ro.observe(el);
    return () => {
      ro.disconnect();
      t.dispose();
      term.current = null;
    };
  }, []);

  useEffect(() => {
    const t = term.current;
    if (!t) return;
    t.reset();
    if (lines.length === 0) t.write("\x1b[2mNo output yet.\x1b[0m\r\n");
    for (const line of lines) t.write(`${line}\r\n`);
  }, [lines]);

  return <div ref={host} className="terminal" role="log" aria-label={label} />;
}
