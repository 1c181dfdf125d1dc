import type { Box, Job } from "@doppio/contracts";
import type { QueryClient } from "@tanstack/react-query";
import { keys } from "./keys.ts";

/** Writes a box everywhere the pages read it; a deleted box leaves the list. */
export function putBox(qc: QueryClient, box: Box): void {
  qc.setQueryData<Box>(keys.box(box.slug), box);
  qc.setQueryData<Box[]>(keys.boxes, (list) => {
    if (!list) return list;
    if (box.status === "deleted") return list.filter((b) => b.slug !== box.slug);
    const i = list.findIndex((b) => b.slug === box.slug);
    if (i === -1) return [box, ...list];
    const next = list.slice();
    next[i] = box;
    return next;
  });
}

/** Jobs are kept newest first, as the API lists them. */
export function putJob(qc: QueryClient, job: Job): void {
  if (!job.box) return;
  qc.setQueryData<Job[]>(keys.jobs(job.box), (list) => {
    // Not loaded yet: the page fetches the whole history when it needs it.
    if (!list) return list;
    const i = list.findIndex((j) => j.id === job.id);
    if (i === -1) return [job, ...list];
    const next = list.slice();
    next[i] = job;
    return next;
  });
}
