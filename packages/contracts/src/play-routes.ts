import { z } from "zod";
import {
  AnsiblePlay,
  AnsiblePlayList,
  AnsiblePlayWithTasks,
  ControlPlaneSshKey,
  PlayIdParams,
  PlayStreamEvents,
  ServerSsh,
  ServerSshRequest,
  ServerSshState,
  StartPlayRequest,
} from "./plays.ts";
import { route } from "./route.ts";

const ServerNameParams = z.object({ name: z.string().max(64) });

/** Routes of the Ansible plays the control plane runs on hosts (administrators only). */
export const playRoutes = {
  getControlPlaneSshKey: route({
    method: "GET",
    path: "/api/v1/admin/ssh-key",
    summary: "The control plane's SSH public key, to install on a host before preparing it",
    tag: "servers",
    auth: "admin",
    responses: { 200: ControlPlaneSshKey },
  }),
  getServerSsh: route({
    method: "GET",
    path: "/api/v1/servers/:name/ssh",
    summary: "How the control plane reaches a host over SSH, and its pinned host keys (null: not set)",
    tag: "servers",
    auth: "admin",
    params: ServerNameParams,
    responses: { 200: ServerSshState },
  }),
  setServerSsh: route({
    method: "POST",
    path: "/api/v1/servers/:name/ssh",
    summary: "Set how the control plane reaches a host over SSH (a new address forgets the pinned host keys)",
    tag: "servers",
    auth: "admin",
    errors: [409],
    params: ServerNameParams,
    body: ServerSshRequest,
    responses: { 200: ServerSsh },
  }),
  startPlay: route({
    method: "POST",
    path: "/api/v1/servers/:name/plays",
    summary: "Run a playbook on a host (Prepare server or Deploy agent); one play per host at a time",
    tag: "servers",
    auth: "admin",
    // 409: a play is already pending or running on this host, or its SSH target is not set.
    errors: [409],
    params: ServerNameParams,
    body: StartPlayRequest,
    responses: { 202: AnsiblePlay },
  }),
  listPlays: route({
    method: "GET",
    path: "/api/v1/servers/:name/plays",
    summary: "A host's plays, newest first",
    tag: "servers",
    auth: "admin",
    params: ServerNameParams,
    responses: { 200: AnsiblePlayList },
  }),
  getPlay: route({
    method: "GET",
    path: "/api/v1/plays/:id",
    summary: "One play with its tasks",
    tag: "servers",
    auth: "admin",
    params: PlayIdParams,
    responses: { 200: AnsiblePlayWithTasks },
  }),
  cancelPlay: route({
    method: "POST",
    path: "/api/v1/plays/:id/cancel",
    summary: "Stop a pending or running play",
    tag: "servers",
    auth: "admin",
    // 409: the play has already ended.
    errors: [409],
    params: PlayIdParams,
    responses: { 200: AnsiblePlay },
  }),
  streamPlay: route({
    method: "GET",
    path: "/api/v1/plays/:id/stream",
    summary: "Follow a play: `play` (status, counters, progress) and `task` events; ends with the play",
    tag: "servers",
    auth: "admin",
    params: PlayIdParams,
    events: PlayStreamEvents,
  }),
} as const;
