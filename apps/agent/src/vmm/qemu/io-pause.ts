import { QmpClient } from "./qmp.ts";

/**
 * Lets a VM run again that its QEMU paused on a failed disk write (status `io-error`: with
 * its default werror=enospc QEMU pauses a guest whose write met a full host disk, and keeps
 * it paused after the space is freed). Says whether it did; any other status is left alone.
 */
export async function contIfIoError(qmpSocket: string): Promise<boolean> {
  const qmp = await QmpClient.connect(qmpSocket, 2_000);
  try {
    const { status } = await qmp.execute<{ status: string }>("query-status");
    if (status !== "io-error") return false;
    await qmp.execute("cont");
    return true;
  } finally {
    qmp.close();
  }
}
