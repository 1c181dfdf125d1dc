import { type AnsiblePlay, type AnsibleTask, routes, routeUrl } from "@doppio/contracts";
import { useEffect, useState } from "react";
import { parseEvent } from "../api/events.ts";

export interface LivePlay {
  play: AnsiblePlay | null;
  /** By task id, in position order when listed with `sortedTasks`. */
  tasks: Record<string, AnsibleTask>;
}

export const sortedTasks = (live: LivePlay): AnsibleTask[] =>
  Object.values(live.tasks).sort((a, b) => a.position - b.position);

/**
 * Follows one play's stream (`task` and `play` events): its current tasks and state first,
 * then every change as Ansible reports it, until the play ends and the server closes it.
 */
export function usePlayStream(id: string | null): LivePlay {
  const [live, setLive] = useState<LivePlay>({ play: null, tasks: {} });
  useEffect(() => {
    setLive({ play: null, tasks: {} });
    if (!id) return;
    const events = routes.streamPlay.events;
    const source = new EventSource(routeUrl(routes.streamPlay, { params: { id } }));
    source.addEventListener("task", (e) => {
      const task = parseEvent(events.task, e);
      if (task) setLive((prev) => ({ ...prev, tasks: { ...prev.tasks, [task.id]: task } }));
    });
    source.addEventListener("play", (e) => {
      const play = parseEvent(events.play, e);
      if (!play) return;
      setLive((prev) => ({ ...prev, play }));
      // The server ends the stream with the play; EventSource would reconnect without this.
      if (play.status !== "pending" && play.status !== "running") source.close();
    });
    return () => source.close();
  }, [id]);
  return live;
}
