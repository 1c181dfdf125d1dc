/** Undo steps registered as setup proceeds; run once, in reverse, collecting every error. */
export class CleanupStack {
  private readonly undo: Array<{ label: string; fn: () => Promise<void> }> = [];

  push(label: string, fn: () => Promise<void>): void {
    this.undo.push({ label, fn });
  }

  /** Forget the undo steps (setup succeeded). */
  release(): void {
    this.undo.length = 0;
  }

  async run(): Promise<Error[]> {
    const errors: Error[] = [];
    while (this.undo.length > 0) {
      const step = this.undo.pop()!;
      try {
        await step.fn();
      } catch (err) {
        errors.push(new Error(`cleanup "${step.label}" failed`, { cause: err }));
      }
    }
    return errors;
  }
}
