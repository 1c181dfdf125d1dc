/** One server-sent event as it arrived. */
export interface SseFrame {
  event: string;
  id: string | null;
  data: unknown;
}

/**
 * Reads a server-sent event stream in the background and keeps every frame, so a test can
 * wait for the one it expects whatever else arrived first.
 */
export class SseReader {
  readonly frames: SseFrame[] = [];
  private waiters: Array<() => void> = [];
  private ended = false;
  private readonly reader: ReadableStreamDefaultReader<string>;

  constructor(res: Response) {
    if (res.status !== 200 || !res.body) throw new Error(`stream refused: ${res.status}`);
    this.reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    void this.pump();
  }

  private async pump(): Promise<void> {
    let buf = "";
    try {
      for (;;) {
        const { value, done } = await this.reader.read();
        if (done) break;
        buf += value;
        for (let end = buf.indexOf("\n\n"); end >= 0; end = buf.indexOf("\n\n")) {
          const frame = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const event = /^event: (.*)$/m.exec(frame)?.[1];
          const data = /^data: (.*)$/m.exec(frame)?.[1];
          if (!event || data === undefined) continue;
          this.frames.push({ event, id: /^id: (.*)$/m.exec(frame)?.[1] ?? null, data: JSON.parse(data) });
        }
        this.wake();
      }
    } catch {
      // cancelled by close()
    }
    this.ended = true;
    this.wake();
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  /** The first frame (in arrival order) that matches; waits for it, fails if the stream ends first. */
  async waitFor<T = any>(match: (f: SseFrame) => boolean): Promise<T> {
    for (;;) {
      const found = this.frames.find(match);
      if (found) return found.data as T;
      if (this.ended) throw new Error(`stream ended without the expected event (${this.frames.length} seen)`);
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  async close(): Promise<void> {
    await this.reader.cancel().catch(() => {});
  }
}
