import "@xterm/xterm/css/xterm.css";
import { Terminal as XTerm } from "@xterm/xterm";
import { useEffect, useRef, useState } from "react";
import { LOG_BUFFER_LINES } from "../lib/box-log.ts";

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

/** One line of terminal text (ANSI colours allowed) and its place in an increasing order. */
interface TermRow {
  seq: number;
  text: string;
}

interface Props {
  rows: readonly TermRow[];
  /**
   * While this stays the same, only rows with a higher seq than the last one written are
   * added (a live log); a new value redraws everything (lines that change in place, or
   * another filter).
   */
  resetKey: unknown;
  label: string;
}

/**
 * A read-only xterm.js view of `rows`. New rows scroll into view unless the reader has
 * scrolled up: then the view stays put and a button offers to jump back to the newest.
 */
export function Terminal({ rows, resetKey, label }: Props) {
  const host = useRef<HTMLDivElement>(null);
  const term = useRef<XTerm | null>(null);
  const written = useRef<{ key: unknown; seq: number }>({ key: undefined, seq: 0 });
  const [unseen, setUnseen] = useState<number | null>(null);
  const scrolledUp = useRef(false);

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
      scrollback: LOG_BUFFER_LINES,
      theme: { background: "#1d2330", foreground: "#e6e9ef" },
    });
    t.open(el);
    term.current = t;
    written.current = { key: Symbol("fresh"), seq: 0 };
    // No fit addon here: size columns from the container width and a measured cell width.
    const cell = measureCellWidth(el);
    const fitColumns = () => {
      const cols = Math.max(20, Math.floor((el.clientWidth - SCROLLBAR_PX) / cell));
      if (cols !== t.cols) t.resize(cols, ROWS);
    };
    fitColumns();
    const ro = new ResizeObserver(fitColumns);
    ro.observe(el);
    // xterm itself stops following output while the viewport is scrolled up.
    const scroll = t.onScroll(() => {
      const b = t.buffer.active;
      const up = b.viewportY < b.baseY;
      if (up === scrolledUp.current) return;
      scrolledUp.current = up;
      setUnseen(up ? 0 : null);
    });
    return () => {
      scroll.dispose();
      ro.disconnect();
      t.dispose();
      term.current = null;
    };
  }, []);

  useEffect(() => {
    const t = term.current;
    if (!t) return;
    const w = written.current;
    const newest = rows.at(-1)?.seq ?? 0;
    if (w.key !== resetKey || newest < w.seq) {
      t.reset();
      scrolledUp.current = false;
      setUnseen(null);
      written.current = { key: resetKey, seq: 0 };
    }
    const from = written.current.seq;
    let start = rows.length;
    while (start > 0 && rows[start - 1]!.seq > from) start--;
    const added = rows.length - start;
    if (added === 0) return;
    let out = "";
    for (let i = start; i < rows.length; i++) out += `${rows[i]!.text}\r\n`;
    t.write(out);
    written.current.seq = newest;
    if (scrolledUp.current) setUnseen((n) => (n ?? 0) + added);
  }, [rows, resetKey]);

  const jump = () => {
    term.current?.scrollToBottom();
    scrolledUp.current = false;
    setUnseen(null);
  };

  return (
    <div className="terminal-wrap">
      <div ref={host} className="terminal" role="log" aria-label={label} />
      {unseen !== null && (
        <button type="button" className="btn btn-small terminal-jump" onClick={jump}>
          Paused · jump to newest{unseen > 0 ? ` (${unseen} new)` : ""}
        </button>
      )}
    </div>
  );
}
