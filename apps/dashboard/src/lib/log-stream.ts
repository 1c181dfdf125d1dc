import { useEffect, useState } from "react";

const MAX_LINES = 1000;

/** Lines from an SSE log stream (one line per message), newest last; empty without a URL. */
export function useLogStream(url: string | undefined): string[] {
  const [lines, setLines] = useState<string[]>([]);
  useEffect(() => {
    setLines([]);
    if (!url) return;
    const source = new EventSource(url);
    source.onmessage = (e: MessageEvent<string>) => {
      setLines((prev) => {
        const next = [...prev, e.data];
        return next.length > MAX_LINES ? next.slice(next.length - MAX_LINES) : next;
      });
    };
    return () => source.close();
  }, [url]);
  return lines;
}
