import { QmpClient } from "./qmp.ts";

/**
 * A VM's run state as its QEMU says over QMP: `running`, `paused`, `inmigrate`, `io-error`
 * (paused on a full disk)...
 */
export async function vmStatus(qmpSocket: string, connectTimeoutMs = 2_000): Promise<string> {
  const qmp = await QmpClient.connect(qmpSocket, connectTimeoutMs);
  try {
    return (await qmp.execute<{ status: string }>("query-status")).status;
  } finally {
    qmp.close();
  }
}

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
