import { type BoxStatus, type JobAction, STEP_LABELS, type StepName } from "@doppio/contracts";

export const STATUS_LABELS: Record<BoxStatus, string> = {
  creating: "Creating",
  starting: "Starting",
  running: "Running",
  stopping: "Stopping",
  stopped: "Stopped",
  hibernating: "Hibernating",
  hibernated: "Hibernated",
  resetting: "Resetting",
  deleting: "Deleting",
  deleted: "Deleted",
  error: "Error",
  unknown: "Host unreachable",
};

/** Statuses that change by themselves soon: shown with a pulsing dot. */
export const BUSY_STATUSES: readonly BoxStatus[] = [
  "creating",
  "starting",
  "stopping",
  "hibernating",
  "resetting",
  "deleting",
];

export const ACTION_TITLES: Record<JobAction, string> = {
  create: "Create",
  start: "Start",
  stop: "Stop",
  reset: "Reset",
  delete: "Delete",
  hibernate: "Hibernate",
  build_golden: "Build golden snapshot",
  build_image: "Build image",
};

export function stepLabel(name: StepName): string {
  return STEP_LABELS[name] ?? name;
}

export function formatMemory(mb: number): string {
  return mb >= 1024 ? `${Math.round((mb / 1024) * 10) / 10} GB` : `${mb} MB`;
}

export function formatBytes(bytes: number): string {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let v = bytes;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${Math.round(v * 10) / 10} ${units[i]}`;
}
